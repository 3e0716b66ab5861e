/*-------------------------------------------------------------------------
 *
 * worker_command.c
 *	  What a mesh worker's foreground commands (worker_exec.c) and
 *	  background commands (worker_background.c) share: admitting a
 *	  background command within the worker's bounds, the status of a
 *	  command's end, recording an end that has no output to store, the
 *	  budget charge after it, and the end of a command the backend did not
 *	  run.  Neither command file calls the other: both stand on this one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <sys/resource.h>

#include "storage/fd.h"

#include "credentials.h"
#include "settings.h"
#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_command.h"
#include "worker_durable.h"
#include "worker_http.h"
#include "worker_reply.h"

/* Descriptors PostgreSQL and the worker hold besides the calls' sockets. */
#define OWN_DESCRIPTORS 32

/*
 * Descriptors this process has open (counted in /proc/self/fd), or -1 where
 * that cannot be told.
 */
static int
open_descriptors(void)
{
	DIR		   *dir = AllocateDir("/proc/self/fd");
	struct dirent *de;
	int			n = 0;

	if (dir == NULL)
		return -1;
	while ((de = ReadDirExtended(dir, "/proc/self/fd", DEBUG1)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	FreeDir(dir);
	return n - 1;				/* the directory's own */
}

/*
 * Whether one more follower's socket would eat into the descriptors kept
 * for the worker's other calls (one each, mesh.worker_max_calls, curl's
 * idle connections and PostgreSQL's own files): a worker that ran out
 * would fail every call routed to it, release included.
 */
static bool
descriptors_short(int *open, long *limit)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
		(*open = open_descriptors()) < 0)
		return false;
	*limit = (long) rl.rlim_cur;
	return *open + 1 + mesh_worker_max_calls + MESH_HTTP_CONNECTION_CACHE + OWN_DESCRIPTORS > *limit;
}

/*
 * A new background command may start on this worker: fewer than
 * mesh.max_background_per_worker are followed here and descriptors are
 * left for the other calls.  Otherwise false, and with REPLY the caller
 * is told (53000) before anything is written or started.
 */
bool
admit_background(WorkerCall *call, bool reply)
{
	int			open;
	long		limit;

	if (call->background_slot)
		return true;
	if (worker_background_slots_used() >= mesh_max_background_per_worker)
	{
		if (reply)
			reply_error(call, ERRCODE_INSUFFICIENT_RESOURCES,
						psprintf("mesh worker %d already follows %d background commands, the most mesh.max_background_per_worker allows",
								 worker_index, worker_background_slots_used()),
						NULL,
						"Wait for one to end (mesh_exec_wait) or end one with mesh_exec_kill; or raise mesh.max_background_per_worker, or mesh.workers to spread runs over more workers.");
		return false;
	}
	if (descriptors_short(&open, &limit))
	{
		if (reply)
			reply_error(call, ERRCODE_INSUFFICIENT_RESOURCES,
						psprintf("mesh worker %d is near its open-files limit: %d of %ld descriptors open, %d kept for its other calls",
								 worker_index, open, limit,
								 mesh_worker_max_calls + MESH_HTTP_CONNECTION_CACHE + OWN_DESCRIPTORS),
						"Each background command a worker follows holds one descriptor.",
						"Raise the server's open-files limit (ulimit -n, or LimitNOFILE of its service), or lower mesh.max_background_per_worker; or end background commands with mesh_exec_kill.");
		return false;
	}
	take_background_slot(call);
	return true;
}

/*
 * The kernel's OOM kill comes first: a command that ran out of memory and
 * then hit its timeout still ran out of memory.  A command the backend says
 * was killed was not killed for this call's caller: a cancelled call
 * abandons its exec's response (cancel_exec).  The backend ended it itself
 * (its sandbox stopped or released, as when the server restarts and the
 * embedded daemon stops with it), so it was interrupted, not cancelled.
 */
MeshExecStatus
exec_status(const MeshExecResult *r)
{
	if (r->oom_killed)
		return MESH_EXEC_OOM;
	if (r->timed_out)
		return MESH_EXEC_TIMEOUT;
	if (r->killed)
		return MESH_EXEC_ERROR;
	return MESH_EXEC_OK;
}

#define EXEC_DISK_QUOTA \
	"disk_quota: the workspace reached its disk quota during the command; its writes failed with EDQUOT (Disk quota exceeded)"

/*
 * A command whose workspace reached its disk quota keeps its own status (it
 * exited as it chose to when its writes failed with EDQUOT); its row's error
 * says disk_quota.  NULL when it did not.
 */
const char *
exec_disk_quota_error(const MeshExecResult *r)
{
	return r->disk_quota ? EXEC_DISK_QUOTA : NULL;
}

/* Wall-clock seconds since START: what a command that ended without its own measure is charged. */
double
seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000000.0;
}

/* After a charge: a run at or over its budget stops, and its sandbox goes. */
void
charge_budget(WorkerCall *call, double charged)
{
	ErrorData  *err;
	double		used = call->ws.compute_seconds + charged;

	call->ws.compute_seconds = used;
	if (call->ws.budget_seconds < 0 || used < call->ws.budget_seconds)
		return;
	if (!store_budget_exhausted(&call->ws, used, &err))
	{
		FreeErrorData(err);
		return;
	}
	spawn_internal_release(call->run_id, call->ws.status_reason);
}

/* A backend's message about a failed exec, without the run's secret values. */
static char *
redact_message(WorkerCall *call, char *message)
{
	ListCell   *lc;
	size_t		len = message ? strlen(message) : 0;

	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		if (message)
			mesh_redact(&message, &len, d->value, d->variable ? d->variable : d->name);
	}
	return message;
}

/*
 * Record an exec's end that has no output to store (a failure, a cancel, a
 * background command's end), durable with the turn; false, logged, when
 * the transaction failed (the reaper fails the row later).
 */
bool
record_exec_end_only(WorkerCall *call, const MeshExecRecord *rec)
{
	ErrorData  *err;
	XLogRecPtr	lsn;

	if (!store_exec_finished(call->exec_id, rec, &lsn, NULL, &err))
	{
		ereport(LOG,
				(errmsg("mesh: the end of exec " INT64_FORMAT " was not recorded: %s",
						call->exec_id, err->message)));
		FreeErrorData(err);
		return false;
	}
	worker_want_durable(lsn);
	return true;
}

/*
 * The backend did not run the command (or broke off): the exec row says
 * why, and the caller hears it, unless a stopped workspace can be woken
 * and the command sent again.
 */
void
finish_exec_failed(WorkerCall *call)
{
	MeshExecRecord rec = {0};
	MeshError	merr = call->run.err;

	rec.status = MESH_EXEC_ERROR;
	merr.message = redact_message(call, merr.message);
	merr.reason = redact_message(call, merr.reason);
	rec.error = merr.message;
	if (merr.failure == MESH_FAIL_NOT_RUNNING && !call->woke_once)
		rec.error = psprintf("%s; the workspace was woken and the command run again", merr.message);
	rec.charged_seconds = seconds_since(call->op_started);
	rec.charge_basis = "wall";
	(void) record_exec_end_only(call, &rec);
	if (!wake_and_retry(call, &merr))
		reply_backend_error(call, NULL, &merr);
}

