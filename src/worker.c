/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The mesh worker pool: every backend call happens here.
 *
 * Each worker owns the runs whose run_id hashes to it.  It takes calls from
 * its queue in shared memory (handoff.c), moves each through a small state
 * machine, and overlaps the HTTP waits of all of them with libcurl multi
 * (worker_http.c).  Between HTTP steps it commits the row changes in short
 * transactions of its own (store.c): the row before the backend call, the
 * outcome after it.
 *
 * Because one worker owns a run, the first exec-class calls of a run that
 * arrive together are serialised here: one materializes the workspace while
 * the others wait, parked, in this process.
 *
 * Hygiene: SIGTERM is die(); the loop sleeps on the latch and the sockets
 * and never polls tables; CHECK_FOR_INTERRUPTS on every turn;
 * pgstat_report_stat after transactions; no process-local pointers in
 * shared memory; no lock is held while a backend works.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <math.h>
#include <sys/stat.h>

#include "access/xlog.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "credentials.h"
#include "handoff.h"
#include "mesh_exec.h"
#include "store.h"
#include "txn.h"
#include "worker_http.h"

typedef enum CallStep
{
	STEP_START,					/* resolve the run's workspace */
	STEP_PARKED,				/* another call of this run is materializing it */
	STEP_ACQUIRING,				/* this call materializes: acquire in flight */
	STEP_DELIVERING,			/* the run token is being written into the workspace */
	STEP_OPERATING,				/* the operation's request is in flight */
	STEP_KILLING,				/* cancelled exec: kill request in flight */
	STEP_FINISHED				/* reply queued (or caller gone) */
} CallStep;

typedef struct WorkerCall
{
	dlist_node	node;
	MemoryContext cxt;
	dsm_segment *seg;
	MeshCall   *hdr;
	shm_mq_handle *mqh;
	MeshOp		op;
	json_t	   *req;
	const char *blob;
	Size		blob_len;
	const char *run_id;
	CallStep	step;
	MeshWorkspace ws;
	MeshBackend be;
	MeshTransfer *transfer;
	MeshOpState opstate;		/* the driver's state for the operation in flight */
	int64		exec_id;
	MeshExecSpec spec;
	XLogRecPtr	exec_row_lsn;	/* exec row's commit, flushed once sent */
	TimestampTz op_started;
	List	   *outbox;			/* OutMessages not yet sent */
	MeshTransfer *kept;			/* a finished transfer whose body a queued reply sends */
	bool		caller_gone;
	bool		budget_bound;	/* the budget, not the caller, set the timeout */
	List	   *delivered;		/* secrets delivered into this exec's environment */
	char	   *secret_body;	/* a request body holding a secret, wiped once sent */
	bool		woke_once;		/* already woke a stopped workspace for this call */
} WorkerCall;

/*
 * A message for the caller: the framed JSON, then the blob (a file's bytes)
 * sent from where it already lies, so a file is not copied into the message.
 */
typedef struct OutMessage
{
	StringInfo	head;
	const char *blob;
	Size		blob_len;
} OutMessage;

static dlist_head calls = DLIST_STATIC_INIT(calls);
static int	ncalls = 0;			/* length of calls */
static MemoryContext worker_cxt;
static int	worker_index;
static char *install_id;

static void spawn_internal_release(const char *run_id, const char *reason);
static bool workspace_has_capability(WorkerCall *call, const char *name);
static void wake_broker(void);
static void climb_tier(WorkerCall *call);

/*--------------------------------------------------------------------------
 * Replies
 *--------------------------------------------------------------------------
 */

/*
 * Queue a message for the caller; sent by flush_outbox().  The blob is not
 * copied: it must live as long as the call (a read's body is kept with its
 * transfer, see complete_transfer).
 */
static void
queue_message(WorkerCall *call, json_t *doc, const char *blob, Size blob_len)
{
	OutMessage *msg = palloc(sizeof(OutMessage));

	msg->head = makeStringInfo();
	mesh_reply_encode(msg->head, doc);
	msg->blob = blob;
	msg->blob_len = blob_len;
	json_decref(doc);
	call->outbox = lappend(call->outbox, msg);
}

static void
reply_ok(WorkerCall *call, json_t *doc, const char *blob, Size blob_len)
{
	queue_message(call, doc, blob, blob_len);
	call->step = STEP_FINISHED;
}

static void
reply_error(WorkerCall *call, const char *sqlstate, const char *message,
			const char *detail, const char *hint)
{
	json_t	   *error = json_pack("{s:s,s:s}", "sqlstate", sqlstate, "message", message);

	if (detail)
		json_object_set_new(error, "detail", json_string(detail));
	if (hint)
		json_object_set_new(error, "hint", json_string(hint));
	queue_message(call, json_pack("{s:o}", "error", error), NULL, 0);
	call->step = STEP_FINISHED;
}

/*
 * Pass a failed transaction's error on to the caller.  A lock timeout means
 * some transaction, quite possibly the caller's own, holds a lock on mesh's
 * rows: say so instead of hanging both processes.
 */
static void
reply_txn_error(WorkerCall *call, ErrorData *err)
{
	if (err->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		reply_error(call, "55P03",
					psprintf("mesh worker could not lock the workspace of run \"%s\" within mesh.worker_lock_timeout",
							 call->run_id),
					"Another transaction holds a lock on mesh's tables.",
					"If the calling transaction itself locked mesh tables, commit or roll it back before calling mesh functions.");
	else
		reply_error(call, unpack_sql_state(err->sqlerrcode), err->message, err->detail, err->hint);
	FreeErrorData(err);
}

/* The SQLSTATE a harness sees for a backend failure, whatever the backend. */
static const char *
failure_sqlstate(MeshFailure failure)
{
	switch (failure)
	{
		case MESH_FAIL_NOT_FOUND:
			return "58P01";		/* undefined_file */
		case MESH_FAIL_PATH_REFUSED:
			return "42501";		/* insufficient_privilege */
		case MESH_FAIL_TOO_LARGE:
			return "54000";		/* program_limit_exceeded */
		case MESH_FAIL_BAD_REQUEST:
			return "22023";		/* invalid_parameter_value */
		case MESH_FAIL_NOT_RUNNING:
			return "55000";		/* object_not_in_prerequisite_state */
		case MESH_FAIL_NO_RESOURCES:
			return "53000";		/* insufficient_resources */
		case MESH_FAIL_UNAVAILABLE:
			return "08006";		/* connection_failure */
		case MESH_FAIL_PERMISSION:
			return "42501";		/* insufficient_privilege */
		case MESH_FAIL_NAME_TOO_LONG:
			return "22001";		/* string_data_right_truncation, as the API's own check */
		case MESH_FAIL_ARGS_TOO_LONG:
			return "54000";		/* program_limit_exceeded */
		case MESH_FAIL_RELEASE_INCOMPLETE:
			return "58030";		/* io_error */
		default:
			return "XX000";
	}
}

static const char *
failure_hint(MeshFailure failure)
{
	switch (failure)
	{
		case MESH_FAIL_PATH_REFUSED:
			return "Paths are relative to the workspace root, or absolute inside /workspace; they may not leave it.";
		case MESH_FAIL_UNAVAILABLE:
			return "Check that the backend is running and reachable; see mesh.backend_catalog.";
		case MESH_FAIL_NO_RESOURCES:
			return "The backend has no room for this: prepare its host as the message says, or release workspaces that are done (mesh-sandboxd at capacity: raise its open-files limit); then retry.";
		case MESH_FAIL_TOO_LARGE:
			return "See mesh.max_file_size and the backend's limits.";
		case MESH_FAIL_PERMISSION:
			return "The workspace's own file modes apply; change them with mesh_exec (chmod), or write the file again.";
		case MESH_FAIL_NAME_TOO_LONG:
			return "Each name in a path may have at most 255 bytes, the whole path at most 4095.";
		case MESH_FAIL_ARGS_TOO_LONG:
			return "One argument may have at most 128 kB and all arguments and environment together about 2 MB; pass large data as mesh_exec's stdin or in a file (mesh_write_file).";
		default:
			return NULL;
	}
}

/* What the caller asked for, as the subject of an error message. */
static const char *
op_noun(MeshOp op)
{
	switch (op)
	{
		case MESH_OP_EXEC:
			return "the command";
		case MESH_OP_READ_FILE:
			return "the file read";
		case MESH_OP_WRITE_FILE:
			return "the file write";
		case MESH_OP_RELEASE:
			return "the release";
		default:
			return "the call";
	}
}

/*
 * A backend's refusal, in the caller's terms: what failed (what, or the
 * call's operation when NULL), for which run, and the backend's own words;
 * its HTTP status and error code go to the detail.  Without an answer
 * (unreachable) the transport's words say it.
 */
static void
reply_backend_error(WorkerCall *call, const char *what, const MeshError *err)
{
	if (err->reason == NULL)
		reply_error(call, failure_sqlstate(err->failure), err->message, NULL,
					failure_hint(err->failure));
	else
		reply_error(call, failure_sqlstate(err->failure),
					psprintf("%s of run \"%s\" failed on backend \"%s\": %s", what ? what : op_noun(call->op),
							 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "?",
							 err->reason),
					err->message, failure_hint(err->failure));
}

/*
 * A file call failed: say it in terms of the path the caller gave, keeping
 * the backend's own words as detail.
 */
static void
reply_file_error(WorkerCall *call, const char *path, const MeshError *err)
{
	const char *message;

	switch (err->failure)
	{
		case MESH_FAIL_NOT_FOUND:
			message = psprintf("file \"%s\" does not exist in the workspace of run \"%s\"",
							   path, call->run_id);
			break;
		case MESH_FAIL_PATH_REFUSED:
			message = psprintf("path \"%s\" is refused in the workspace of run \"%s\": %s", path, call->run_id,
							   err->reason ? err->reason : "it is not a file inside the workspace");
			break;
		case MESH_FAIL_TOO_LARGE:
			message = psprintf("file \"%s\" is too large", path);
			break;
		case MESH_FAIL_PERMISSION:
			message = psprintf("file \"%s\" in the workspace of run \"%s\" is not accessible: %s",
							   path, call->run_id, err->reason ? err->reason : "permission denied");
			break;
		case MESH_FAIL_NAME_TOO_LONG:
			message = psprintf("path \"%.80s%s\" is too long: %s", path, strlen(path) > 80 ? "..." : "",
							   err->reason ? err->reason : "a name in it is over the filesystem's limit");
			break;
		default:
			reply_backend_error(call, NULL, err);
			return;
	}
	reply_error(call, failure_sqlstate(err->failure), message, err->message,
				failure_hint(err->failure));
}

/* Send what can be sent now; the rest waits for the caller to read. */
static void
flush_outbox(WorkerCall *call)
{
	while (call->outbox != NIL && !call->caller_gone)
	{
		OutMessage *msg = (OutMessage *) linitial(call->outbox);
		shm_mq_iovec parts[2] = {{msg->head->data, msg->head->len}, {msg->blob, msg->blob_len}};

		/* after WOULD_BLOCK, the same parts again: the queue remembers how far it got */
		shm_mq_result res = shm_mq_sendv(call->mqh, parts, msg->blob_len > 0 ? 2 : 1, true, true);

		if (res == SHM_MQ_WOULD_BLOCK)
			return;
		if (res == SHM_MQ_DETACHED)
			call->caller_gone = true;
		call->outbox = list_delete_first(call->outbox);
	}
}

/*--------------------------------------------------------------------------
 * Taking calls
 *--------------------------------------------------------------------------
 */

/* Attach a queued call segment; NULL when its caller already gave up. */
static WorkerCall *
attach_call(dsm_handle handle)
{
	MeshCall   *hdr;
	shm_mq_handle *mqh;
	dsm_segment *seg = mesh_attach_call(handle, &hdr, &mqh);
	WorkerCall *call;
	char	   *base;

	if (seg == NULL)
		return NULL;
	base = dsm_segment_address(seg);
	call = MemoryContextAllocZero(worker_cxt, sizeof(WorkerCall));
	call->cxt = AllocSetContextCreate(worker_cxt, "mesh call", ALLOCSET_DEFAULT_SIZES);
	call->seg = seg;
	call->hdr = hdr;
	call->mqh = mqh;
	call->op = hdr->op;
	call->req = json_loadb(base + hdr->json_off, hdr->json_len, 0, NULL);
	call->blob = base + hdr->blob_off;
	call->blob_len = hdr->blob_len;
	call->run_id = call->req ? json_string_value(json_object_get(call->req, "run_id")) : NULL;
	call->step = STEP_START;
	return call;
}

/*
 * Take calls from the queue while fewer than mesh.worker_max_calls are in
 * progress here (internal releases included); the rest wait in the queue,
 * their callers asleep, cancellably, and callers that find the queue full
 * wait for room (handoff.c).  Bounding the calls bounds this process's
 * sockets and the backend's concurrent requests.
 */
static void
take_new_calls(void)
{
	dsm_handle	handle;

	while (ncalls < mesh_worker_max_calls && mesh_worker_pop(worker_index, &handle))
	{
		WorkerCall *call = attach_call(handle);

		if (call == NULL)
			continue;
		if (call->req == NULL || call->run_id == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(call->cxt);

			reply_error(call, "XX000", "mesh: malformed request", NULL, NULL);
			MemoryContextSwitchTo(old);
		}
		else if (call->hdr->database != MyDatabaseId)
		{
			MemoryContext old = MemoryContextSwitchTo(call->cxt);

			reply_error(call, "55000",
						psprintf("mesh_exec's workers serve database \"%s\", not this one", mesh_database),
						NULL, "Call mesh functions in the database named by mesh.database, or change that setting and restart.");
			MemoryContextSwitchTo(old);
		}
		dlist_push_tail(&calls, &call->node);
		ncalls++;
	}
}

/* Calls are waiting in the queue and there is room to take them now. */
static bool
queued_calls_fit(void)
{
	return ncalls < mesh_worker_max_calls && mesh_worker_has_queued(worker_index);
}

static void
free_call(WorkerCall *call)
{
	if (call->transfer)
		mesh_http_free(call->transfer);
	if (call->kept)
		mesh_http_free(call->kept);
	if (call->be.config)
		json_decref(call->be.config);
	if (call->req)
		json_decref(call->req);
	dlist_delete(&call->node);
	ncalls--;
	/* the queue handle lives in the worker's top context: free it with the call */
	if (call->mqh)
		shm_mq_detach(call->mqh);
	if (call->seg)
		dsm_detach(call->seg);
	MemoryContextDelete(call->cxt);
	pfree(call);
}

/*
 * A call the worker makes to itself, with nobody waiting: releasing the
 * sandbox of a run that exhausted its budget, so no compute outlives the
 * decision.  It goes through the same state machine as a caller's release.
 */
static void
spawn_internal_release(const char *run_id, const char *reason)
{
	WorkerCall *call = MemoryContextAllocZero(worker_cxt, sizeof(WorkerCall));

	call->cxt = AllocSetContextCreate(worker_cxt, "mesh internal call", ALLOCSET_DEFAULT_SIZES);
	call->op = MESH_OP_RELEASE;
	call->req = json_pack("{s:s,s:s?}", "run_id", run_id, "reason", reason);
	call->run_id = json_string_value(json_object_get(call->req, "run_id"));
	call->caller_gone = true;
	call->step = STEP_START;
	dlist_push_tail(&calls, &call->node);
	ncalls++;
}

/*--------------------------------------------------------------------------
 * Materialization
 *--------------------------------------------------------------------------
 */

/*
 * Is another call of this run changing its workspace's state right now
 * (materializing or releasing it)?  Such changes are exclusive: the run's
 * other calls wait, parked, and start over when it ends.
 */
static bool
run_is_changing(const char *run_id, WorkerCall *except)
{
	dlist_iter	iter;

	dlist_foreach(iter, &calls)
	{
		WorkerCall *other = dlist_container(WorkerCall, node, iter.cur);

		if (other == except || strcmp(other->run_id, run_id) != 0)
			continue;
		if (other->step == STEP_ACQUIRING ||
			(other->op == MESH_OP_RELEASE && other->step == STEP_OPERATING))
			return true;
	}
	return false;
}

/* A state change ended: parked calls of the run start over, or fail alike. */
static void
wake_parked(const char *run_id, const MeshError *failed)
{
	dlist_iter	iter;

	dlist_foreach(iter, &calls)
	{
		WorkerCall *other = dlist_container(WorkerCall, node, iter.cur);

		if (other->step != STEP_PARKED || strcmp(other->run_id, run_id) != 0)
			continue;
		if (failed)
		{
			MemoryContext old = MemoryContextSwitchTo(other->cxt);

			reply_backend_error(other, "setting up the workspace", failed);
			MemoryContextSwitchTo(old);
		}
		else
			other->step = STEP_START;
	}
}

static bool
load_backend(WorkerCall *call)
{
	if (call->be.driver)
		return true;
	if (mesh_backend_from_workspace(&call->ws, &call->be))
		return true;
	reply_error(call, "55000",
				psprintf("run \"%s\" was materialized by backend \"%s\", which no longer has a usable catalog entry",
						 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "(none)"),
				NULL, "Restore the backend with mesh.backend_add(), or release the workspace by hand.");
	return false;
}

static void
start_transfer(WorkerCall *call, MeshHttpRequest *req, size_t max_response)
{
	call->transfer = mesh_http_start(req, max_response, call);
}

/* A fresh driver state for the next operation of this call. */
static MeshOpState *
begin_op(WorkerCall *call)
{
	memset(&call->opstate, 0, sizeof(call->opstate));
	return &call->opstate;
}

/*
 * A parser asked for another request: send it and stay in the same step.
 * Returns true when that happened, so the caller stops here.
 */
static bool
continue_op(WorkerCall *call, MeshStepResult r, size_t max_response)
{
	if (r != MESH_STEP_NEXT)
		return false;
	call->opstate.step++;
	start_transfer(call, &call->opstate.next, max_response);
	return true;
}

/* Ask the recorded backend to create (or wake) the workspace. */
static void
start_acquire(WorkerCall *call)
{
	MeshHttpRequest req;
	MeshSize	size = MESH_SIZE_STANDARD;
	MeshOpState *st;

	if (!load_backend(call))
		return;
	(void) mesh_size_parse(call->ws.size ? call->ws.size : "standard", &size);
	st = begin_op(call);
	/* the creation-time policy, also on a wake: policy changes never retrofit */
	st->egress = call->ws.egress;
	call->be.driver->acquire_request(&call->be, st, call->ws.external_ref, size,
									 install_id, &req);
	start_transfer(call, &req, 1024 * 1024);
	call->step = STEP_ACQUIRING;
}

/*
 * The backend says the workspace is not running (its sandbox stopped: the
 * server or the daemon restarted).  Acquire wakes it with its files; then
 * the call starts over.  Once per call, so a failing wake cannot loop.
 */
static bool
wake_and_retry(WorkerCall *call, const MeshError *merr)
{
	if (merr->failure != MESH_FAIL_NOT_RUNNING || call->woke_once)
		return false;
	call->woke_once = true;
	ereport(LOG, (errmsg("mesh: the workspace of run \"%s\" was not running on backend \"%s\"; waking it",
						 call->run_id, call->ws.backend_kind)));
	start_acquire(call);
	return true;
}

static void
begin_materialize(WorkerCall *call)
{
	ErrorData  *err;

	if (strcmp(call->ws.status, "pending") == 0 && call->ws.external_ref == NULL)
	{
		if (!store_begin_materialize(&call->ws, install_id, &err))
		{
			reply_txn_error(call, err);
			return;
		}
		queue_message(call,
					  json_pack("{s:s}", "notice",
								psprintf("mesh: setting up a sandbox for run \"%s\" on backend \"%s\"%s; the first call takes a moment",
										 call->run_id, call->ws.backend_kind,
										 workspace_has_capability(call, "snapshot") ? ""
										 : " (no snapshot capability: it starts empty)")),
					  NULL, 0);
	}
	else if (strcmp(call->ws.status, "pending") == 0)
	{
		/* hibernated, or an interrupted acquire: acquire again, on the backend and under the name it has */
		bool		interrupted = call->ws.status_reason != NULL &&
			strncmp(call->ws.status_reason, MESH_ACQUIRE_INTERRUPTED,
					strlen(MESH_ACQUIRE_INTERRUPTED)) == 0;

		if (!store_begin_wake(&call->ws, &err))
		{
			reply_txn_error(call, err);
			return;
		}
		queue_message(call,
					  json_pack("{s:s}", "notice",
								psprintf(interrupted ? "mesh: setting up the sandbox of run \"%s\" on backend \"%s\" again (the last try was interrupted)"
										 : "mesh: waking the hibernated workspace of run \"%s\" on backend \"%s\"",
										 call->run_id, call->ws.backend_kind)),
					  NULL, 0);
	}
	/* else: acquiring left over from a crash: the same idempotent acquire */
	start_acquire(call);
}

static void
finish_acquire(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshCapabilities caps;
	MeshError	merr = {0};
	ErrorData  *err;

	MeshStepResult r = call->be.driver->acquire_response(&call->be, &call->opstate, resp, &caps, &merr);

	if (continue_op(call, r, 1024 * 1024))
		return;
	if (r == MESH_STEP_FAILED)
	{
		bool		retryable = merr.failure == MESH_FAIL_UNAVAILABLE ||
			merr.failure == MESH_FAIL_NO_RESOURCES || merr.failure == MESH_FAIL_PROTOCOL;

		if (!store_materialize_failed(&call->ws, retryable, merr.message, &err))
			FreeErrorData(err);
		call->step = STEP_START;	/* so wake_parked does not see us acquiring */
		reply_backend_error(call, "setting up the workspace", &merr);
		wake_parked(call->run_id, &merr);
		return;
	}
	if (!store_materialized(&call->ws, &caps, &err))
	{
		call->step = STEP_START;
		reply_txn_error(call, err);
		wake_parked(call->run_id, NULL);
		return;
	}
	call->step = STEP_START;
	wake_parked(call->run_id, NULL);
}

/*--------------------------------------------------------------------------
 * Operations
 *--------------------------------------------------------------------------
 */

/*
 * Whether the workspace's recorded capabilities include NAME.  Capabilities
 * are recorded when the workspace is materialized; a workspace without them
 * (or with unreadable ones) has none: absent means absent (invariant 6).
 */
static bool
workspace_has_capability(WorkerCall *call, const char *name)
{
	json_t	   *caps = call->ws.capabilities ? json_loads(call->ws.capabilities, 0, NULL) : NULL;
	bool		has = caps != NULL && json_is_true(json_object_get(caps, name));

	if (caps)
		json_decref(caps);
	return has;
}

/*
 * The remaining compute budget bounds this exec's timeout.  A run with
 * nothing left is stopped here: its workspace fails, with the reason.
 */
static bool
bound_by_budget(WorkerCall *call)
{
	double		remaining;
	ErrorData  *err;

	if (call->ws.budget_seconds < 0)
		return true;
	remaining = call->ws.budget_seconds - call->ws.compute_seconds;
	if (remaining <= 0)
	{
		if (!store_budget_exhausted(&call->ws, call->ws.compute_seconds, &err))
			FreeErrorData(err);
		reply_error(call, "53400", call->ws.status_reason, NULL,
					"Raise the budget with mesh.run_set_budget() or mesh.agent_set_budget(), or start a new run.");
		spawn_internal_release(call->run_id, call->ws.status_reason);
		return false;
	}
	if (call->spec.timeout_ms > remaining * 1000.0)
	{
		call->spec.timeout_ms = Max((long) ceil(remaining * 1000.0), 1);
		call->budget_bound = true;
	}
	return true;
}

/* Room for both streams at the clamp, base64-encoded, and the envelope. */
static size_t
exec_response_limit(WorkerCall *call)
{
	return (size_t) call->spec.max_output_bytes * 3 + 64 * 1024;
}

static bool
list_has_variable(List *delivered)
{
	ListCell   *lc;

	foreach(lc, delivered)
		if (((MeshDelivered *) lfirst(lc))->variable)
			return true;
	return false;
}

/*
 * Secrets the run's grants deliver as environment ride in the exec request
 * body, over the caller's own variables; never in a URL, never in the row
 * (which keeps only the caller's variable names).
 */
static void
deliver_environment(WorkerCall *call)
{
	ListCell   *lc;
	json_t	   *env;

	if (!list_has_variable(call->delivered))
		return;
	env = call->spec.env ? json_deep_copy(call->spec.env) : json_pack("{}");
	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		if (d->variable)
			json_object_set_new(env, d->variable, json_string(d->value));
	}
	call->spec.env = env;
	json_object_set_new(call->req, "delivered_env", env);	/* freed with the request */
}

/*
 * Delivered values never come back out: redact them from the output and
 * from the egress denials.
 */
static void
redact_delivered(WorkerCall *call, MeshExecResult *result)
{
	ListCell   *lc;

	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		const char *label = d->variable ? d->variable : d->name;

		mesh_redact(&result->stdout_data, &result->stdout_len, d->value, label);
		mesh_redact(&result->stderr_data, &result->stderr_len, d->value, label);
		/* a denied host name can carry a value: events and NOTICEs get this text */
		if (result->egress_denials)
			result->egress_denials = mesh_redact_json(result->egress_denials, d->value, label);
		mesh_forget(d->value);
	}
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

static void
start_exec(WorkerCall *call)
{
	json_t	   *argv = json_object_get(call->req, "argv");
	const char **args = palloc(sizeof(char *) * (json_array_size(argv) + 1));
	MeshHttpRequest req;
	ErrorData  *err;
	size_t		i;
	json_t	   *item;

	if (!workspace_has_capability(call, "shell"))
	{
		reply_error(call, "0A000",
					psprintf("backend \"%s\" cannot run commands (it does not declare the shell capability)",
							 call->ws.backend_kind),
					NULL, "Pin this agent to a backend with shell, or use only file calls.");
		return;
	}
	json_array_foreach(argv, i, item)
		args[i] = json_string_value(item);
	call->spec.argv = args;
	call->spec.argc = (int) json_array_size(argv);
	call->spec.dir = json_string_value(json_object_get(call->req, "dir"));
	/* absent and JSON null both mean no variables of the caller's */
	call->spec.env = json_is_object(json_object_get(call->req, "env"))
		? json_object_get(call->req, "env") : NULL;
	if (json_is_true(json_object_get(call->req, "has_stdin")))
	{
		call->spec.stdin_data = call->blob;
		call->spec.stdin_len = call->blob_len;
	}
	call->spec.timeout_ms = (long) json_integer_value(json_object_get(call->req, "timeout_ms"));
	call->spec.max_output_bytes = (long) json_integer_value(json_object_get(call->req, "max_output"));
	if (!bound_by_budget(call))
		return;

	if (!store_exec_started(&call->ws, &call->spec, &call->exec_id, &call->exec_row_lsn,
							&call->delivered, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	deliver_environment(call);
	call->spec.exec_key = psprintf(INT64_FORMAT, call->exec_id);
	call->be.driver->exec_request(&call->be, begin_op(call), call->ws.external_ref, &call->spec, &req);
	call->op_started = GetCurrentTimestamp();
	start_transfer(call, &req, exec_response_limit(call));
	call->step = STEP_OPERATING;
	/* put the request on the wire, then make the exec row durable meanwhile */
	mesh_http_drive();
	mesh_flush_to(call->exec_row_lsn);
}

/*
 * The kernel's OOM kill comes first: a command that ran out of memory and
 * then hit its timeout still ran out of memory.
 */
static const char *
exec_status(const MeshExecResult *r)
{
	if (r->oom_killed)
		return "oom";
	if (r->timed_out)
		return "timeout";
	if (r->killed)
		return "cancelled";
	return "ok";
}

static double
seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000000.0;
}

/* After a charge: a run at or over its budget stops, and its sandbox goes. */
static void
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

/*
 * Tell the caller when the workspace's network policy refused connections
 * during the exec, so a connection error in the output is not mistaken for
 * a flaky network (the events hold every detail).
 */
static void
notice_egress_denials(WorkerCall *call, const char *denials_text)
{
	json_t	   *denials = denials_text ? json_loads(denials_text, 0, NULL) : NULL;
	StringInfoData msg;
	size_t		i;
	json_t	   *d;

	if (!json_is_array(denials) || json_array_size(denials) == 0)
	{
		if (denials)
			json_decref(denials);
		return;
	}
	initStringInfo(&msg);
	appendStringInfo(&msg, "mesh: the workspace network policy of run \"%s\" refused %zu connection(s):",
					 call->run_id, json_array_size(denials));
	json_array_foreach(denials, i, d)
	{
		if (i == 3)
		{
			appendStringInfoString(&msg, " ...");
			break;
		}
		appendStringInfo(&msg, "%s %s:%lld (%s)", i ? "," : "",
						 json_string_value(json_object_get(d, "host")),
						 (long long) json_integer_value(json_object_get(d, "port")),
						 json_string_value(json_object_get(d, "reason")));
	}
	appendStringInfoString(&msg, "; see mesh.run_network() and the egress_denied events");
	json_decref(denials);
	queue_message(call, json_pack("{s:s}", "notice", msg.data), NULL, 0);
}

static void
finish_exec(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshExecResult result;
	MeshExecRecord rec = {0};
	MeshError	merr = {0};
	ErrorData  *err;

	MeshStepResult r = call->be.driver->exec_response(&call->be, &call->opstate, resp, &result, &merr);

	if (continue_op(call, r, exec_response_limit(call)))
		return;
	if (r == MESH_STEP_FAILED)
	{
		rec.status = "error";
		merr.message = redact_message(call, merr.message);
		merr.reason = redact_message(call, merr.reason);
		rec.error = merr.message;
		if (merr.failure == MESH_FAIL_NOT_RUNNING && !call->woke_once)
			rec.error = psprintf("%s; the workspace was woken and the command run again", merr.message);
		rec.charged_seconds = seconds_since(call->op_started);
		rec.charge_basis = "wall";
		if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
			FreeErrorData(err);
		if (!wake_and_retry(call, &merr))
			reply_backend_error(call, NULL, &merr);
		return;
	}
	redact_delivered(call, &result);
	result.stdout_data = mesh_sanitize_text(result.stdout_data, result.stdout_len);
	result.stderr_data = mesh_sanitize_text(result.stderr_data, result.stderr_len);
	rec.status = exec_status(&result);
	if (strcmp(rec.status, "timeout") == 0 && call->budget_bound)
		rec.status = "budget_exhausted";
	rec.result = &result;
	rec.charged_seconds = result.cpu_metered ? result.cpu_seconds : result.wall_seconds;
	/* stopped at the bound the budget set: what was left of it is spent, whatever the basis */
	if (strcmp(rec.status, "budget_exhausted") == 0)
		rec.charged_seconds = Max(rec.charged_seconds,
								  call->ws.budget_seconds - call->ws.compute_seconds);
	rec.charge_basis = result.cpu_metered ? "cpu" : "wall";
	if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	charge_budget(call, rec.charged_seconds);
	notice_egress_denials(call, result.egress_denials);
	if (strcmp(rec.status, "oom") == 0)
		climb_tier(call);
	reply_ok(call, json_pack("{s:i,s:s,s:s,s:s,s:b,s:I}",
							 "exit_code", result.exit_code,
							 "stdout", result.stdout_data,
							 "stderr", result.stderr_data,
							 "status", rec.status,
							 "truncated", result.truncated,
							 "exec_id", (json_int_t) call->exec_id),
			 NULL, 0);
}

/*
 * The command ran out of memory: its agent's next runs get a larger tier
 * (once per run), and the caller is told what happened to the tier.
 */
static void
climb_tier(WorkerCall *call)
{
	ErrorData  *err;
	char	   *what;

	if (!store_tier_climb_on_oom(call->exec_id, &what, &err))
	{
		what = psprintf("its agent's tier climb could not be recorded: %s", err->message);
		FreeErrorData(err);
	}
	if (what)
		queue_message(call, json_pack("{s:s}", "notice",
									  psprintf("mesh: the command ran out of memory in the workspace of run \"%s\"; %s",
											   call->run_id, what)),
					  NULL, 0);
}

/* The caller stopped waiting: kill the command's tree in the sandbox. */
static void
cancel_exec(WorkerCall *call)
{
	MeshHttpRequest req;

	mesh_http_free(call->transfer);
	call->transfer = NULL;
	call->be.driver->kill_request(&call->be, begin_op(call), call->ws.external_ref,
								  call->spec.exec_key, &req);
	start_transfer(call, &req, 64 * 1024);
	call->step = STEP_KILLING;
}

static void
finish_cancel(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshExecRecord rec = {0};
	ErrorData  *err;
	MeshError	merr = {0};

	if (continue_op(call, call->be.driver->kill_response(&call->be, &call->opstate, resp, &merr),
					64 * 1024))
		return;

	rec.status = "cancelled";
	rec.error = resp->transport_error
		? psprintf("cancelled by the caller; the kill request failed: %s", resp->transport_error)
		: "cancelled by the caller (interrupt or statement_timeout)";
	rec.charged_seconds = seconds_since(call->op_started);
	rec.charge_basis = "wall";
	if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
		FreeErrorData(err);
	else
		charge_budget(call, rec.charged_seconds);
	call->step = STEP_FINISHED;
}

/*
 * The file operation is not over yet: the driver asked for another request,
 * or the workspace had stopped and is being woken for a retry.
 */
static bool
op_continues(WorkerCall *call, MeshStepResult r, const MeshError *merr, size_t max_response)
{
	return continue_op(call, r, max_response) ||
		(r == MESH_STEP_FAILED && wake_and_retry(call, merr));
}

static void
start_read(WorkerCall *call)
{
	MeshHttpRequest req;

	call->be.driver->read_request(&call->be, begin_op(call), call->ws.external_ref,
								  json_string_value(json_object_get(call->req, "path")), &req);
	start_transfer(call, &req, (size_t) mesh_max_file_bytes + 1);
	call->step = STEP_OPERATING;
}

static void
finish_read(WorkerCall *call, const MeshHttpResponse *resp)
{
	const char *path = json_string_value(json_object_get(call->req, "path"));
	MeshError	merr = {0};
	ErrorData  *err;
	const char *data = NULL;
	size_t		len = 0;
	MeshStepResult r = call->be.driver->read_response(&call->be, &call->opstate, resp, &data, &len, &merr);
	bool		ok = r == MESH_STEP_DONE;

	if (op_continues(call, r, &merr, (size_t) mesh_max_file_bytes + 1))
		return;
	if (!ok && resp->transport_error && resp->status == 0 &&
		strstr(resp->transport_error, "limit") != NULL)
		mesh_error_set(&merr, MESH_FAIL_TOO_LARGE, "file \"%s\" is larger than mesh.max_file_size (%d bytes)",
					   path, mesh_max_file_bytes);
	if (!store_file_event(&call->ws, "file_read", path, ok ? (int64) len : 0,
						  ok ? NULL : merr.message, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!ok)
		reply_file_error(call, path, &merr);
	else
		reply_ok(call, json_pack("{s:b}", "ok", 1), data, len);
}

static void
start_write(WorkerCall *call)
{
	MeshHttpRequest req;

	call->be.driver->write_request(&call->be, begin_op(call), call->ws.external_ref,
								   json_string_value(json_object_get(call->req, "path")),
								   (int) json_integer_value(json_object_get(call->req, "mode")),
								   call->blob, call->blob_len, &req);
	start_transfer(call, &req, 64 * 1024);
	call->step = STEP_OPERATING;
}

static void
finish_write(WorkerCall *call, const MeshHttpResponse *resp)
{
	const char *path = json_string_value(json_object_get(call->req, "path"));
	MeshError	merr = {0};
	ErrorData  *err;
	MeshStepResult r = call->be.driver->write_response(&call->be, &call->opstate, resp, &merr);
	bool		ok = r == MESH_STEP_DONE;

	if (op_continues(call, r, &merr, 64 * 1024))
		return;
	if (!store_file_event(&call->ws, "file_write", path, (int64) call->blob_len,
						  ok ? NULL : merr.message, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!ok)
		reply_file_error(call, path, &merr);
	else
		reply_ok(call, json_pack("{s:b}", "ok", 1), NULL, 0);
}

/*--------------------------------------------------------------------------
 * Release
 *--------------------------------------------------------------------------
 */

static void
reply_outcome(WorkerCall *call, const char *outcome)
{
	reply_ok(call, json_pack("{s:s}", "outcome", outcome), NULL, 0);
}

/* The reaper releases idle workspaces with "idle": hibernate if possible. */
static bool
release_for_idleness(WorkerCall *call)
{
	return json_is_true(json_object_get(call->req, "idle"));
}

static void
start_release(WorkerCall *call)
{
	const char *reason = json_string_value(json_object_get(call->req, "reason"));
	MeshHttpRequest req;
	ErrorData  *err;
	const char *status = call->ws.status;

	if (strcmp(status, "released") == 0 || call->ws.release_outcome != NULL)
	{
		reply_outcome(call, "already released");
		return;
	}
	if (call->ws.external_ref == NULL)
	{
		if (!store_released(&call->ws, "never materialized", reason, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, "never materialized");
		return;
	}
	if (!mesh_backend_from_workspace(&call->ws, &call->be) ||
		(call->be.driver->needs_credential(call->be.config) && call->be.credential == NULL))
	{
		call->ws.backend_found = false;
		if (!store_release_stuck(&call->ws,
								 psprintf("backend \"%s\" has no catalog entry or credential left to release it with",
										  call->ws.backend_kind),
								 false, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, "must be released by hand");
		return;
	}
	if (!store_begin_release(&call->ws, reason, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	call->be.driver->release_request(&call->be, begin_op(call), call->ws.external_ref,
									 release_for_idleness(call) && workspace_has_capability(call, "hibernate"),
									 &req);
	start_transfer(call, &req, 64 * 1024);
	call->step = STEP_OPERATING;
}

static void finish_release_outcome(WorkerCall *call, const MeshHttpResponse *resp);

static void
finish_release(WorkerCall *call, const MeshHttpResponse *resp)
{
	finish_release_outcome(call, resp);
	if (call->step == STEP_OPERATING)
		return;
	if (call->ws.release_outcome != NULL)	/* released now (an idle hibernation is not) */
	{
		mesh_broker_forget_workspace(call->ws.external_ref);
		if (call->ws.has_grants)
			wake_broker();		/* it stops listening there and removes the rest */
	}
	wake_parked(call->run_id, NULL);
}

static void
finish_release_outcome(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshReleaseOutcome outcome;
	MeshError	merr = {0};
	ErrorData  *err;
	const char *text;

	MeshStepResult r = call->be.driver->release_response(&call->be, &call->opstate, resp, &outcome, &merr);

	if (continue_op(call, r, 64 * 1024))
		return;
	if (r == MESH_STEP_FAILED)
	{
		if (merr.failure == MESH_FAIL_NOT_FOUND)
		{
			/* the backend no longer holds it: nothing is left to release */
			if (!store_released(&call->ws, "destroyed", "the backend no longer had the workspace", &err))
				reply_txn_error(call, err);
			else
				reply_outcome(call, "destroyed");
			return;
		}
		if (!store_release_stuck(&call->ws, merr.message,
								 merr.failure == MESH_FAIL_RELEASE_INCOMPLETE, &err))
			FreeErrorData(err);
		reply_error(call, failure_sqlstate(merr.failure),
					psprintf("could not release the workspace of run \"%s\": %s", call->run_id,
							 merr.reason ? merr.reason : merr.message),
					psprintf("%s%s%s", merr.reason ? merr.message : "", merr.reason ? ". " : "",
							 merr.failure == MESH_FAIL_RELEASE_INCOMPLETE
							 ? "The workspace stays recorded as releasing; the reaper retries at its next sweep (mesh.sweep() runs one now), and mesh_release can be called again."
							 : "The workspace stays recorded as releasing; mesh_release can be called again."),
					failure_hint(merr.failure));
		return;
	}
	text = outcome == MESH_RELEASE_HIBERNATED ? "hibernated" : "destroyed";
	if (outcome == MESH_RELEASE_HIBERNATED && release_for_idleness(call))
	{
		/* the run lives on: its next call wakes the workspace, files intact */
		if (!store_idle_hibernated(&call->ws, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, text);
		return;
	}
	if (!store_released(&call->ws, text, NULL, &err))
		reply_txn_error(call, err);
	else
		reply_outcome(call, text);
}

/*--------------------------------------------------------------------------
 * The state machine
 *--------------------------------------------------------------------------
 */

/*
 * The role that made the call (an oid, as text), which a run belongs to
 * when it declares it; NULL for the pool's own calls (reaper releases).
 */
static const char *
caller_role(WorkerCall *call)
{
	if (call->hdr == NULL || !OidIsValid(call->hdr->user))
		return NULL;
	return psprintf("%u", call->hdr->user);
}

static void
run_declare(WorkerCall *call)
{
	char	   *row_json;
	ErrorData  *err;

	if (!store_declare(call->run_id,
					   json_string_value(json_object_get(call->req, "agent_id")),
					   json_string_value(json_object_get(call->req, "actor_id")),
					   json_string_value(json_object_get(call->req, "parent_run_id")),
					   json_string_value(json_object_get(call->req, "environment")),
					   caller_role(call), &row_json, &err))
		reply_txn_error(call, err);
	else
		reply_ok(call, json_pack("{s:s}", "row", row_json), NULL, 0);
}

/* Refuse work on a workspace that the run can no longer reach. */
static bool
refuse_unreachable(WorkerCall *call)
{
	const char *status = call->ws.status;

	if (strcmp(status, "released") == 0 || strcmp(status, "releasing") == 0)
	{
		reply_error(call, "55000",
					psprintf("run \"%s\" has released its workspace", call->run_id),
					NULL, "A released run cannot reach its workspace again; declare a new run.");
		return true;
	}
	if (strcmp(status, "failed") == 0)
	{
		bool		budget = call->ws.status_reason &&
			strncmp(call->ws.status_reason, "budget exhausted", 16) == 0;

		reply_error(call, budget ? "53400" : "55000",
					psprintf("the workspace of run \"%s\" has stopped: %s", call->run_id,
							 call->ws.status_reason ? call->ws.status_reason : "failed"),
					NULL,
					budget ? "Raise the budget with mesh.run_set_budget() or mesh.agent_set_budget(), or start a new run."
					: "Release the run and declare a new one.");
		return true;
	}
	return false;
}

/* A token was minted: the broker starts listening for its workspace. */
static void
wake_broker(void)
{
	int			procno = mesh_shared->broker_procno;

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * The broker listens for a workspace a moment after its token is minted;
 * the command must not run before it does.  Bounded: a broker that is down
 * only means the sandbox's exchange is refused, visibly.
 */
static void
wait_for_broker_socket(const char *ref)
{
	char	   *path;
	struct stat st;

	if (mesh_shared->broker_procno < 0)
		return;
	path = mesh_broker_socket_path(ref);
	for (int i = 0; i < 500 && stat(path, &st) != 0; i++)
		pg_usleep(1000L);
}

/*
 * A run with grants needs a live run token in its workspace before it works
 * there: minted (only its hash stored), then written through the backend's
 * file call, mode 0600.  Again after a rotation revoked the old one.
 */
static bool
deliver_token_first(WorkerCall *call)
{
	MeshHttpRequest req;
	ErrorData  *err;
	char	   *hash;
	char	   *token;
	char	   *content;

	if (!call->ws.has_grants || call->ws.token_valid)
		return false;
	token = mesh_token_new(&hash);
	if (!store_mint_token(&call->ws, hash, &err))
	{
		mesh_forget(token);
		reply_txn_error(call, err);
		return true;
	}
	content = psprintf("%s\n", token);
	mesh_forget(token);
	wake_broker();
	call->be.driver->write_request(&call->be, begin_op(call), call->ws.external_ref,
								   MESH_TOKEN_PATH, 0600, content, strlen(content), &req);
	start_transfer(call, &req, 64 * 1024);
	call->secret_body = content;	/* curl sends from it; wiped once sent */
	call->step = STEP_DELIVERING;
	return true;
}

static void
finish_token_delivery(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshError	merr = {0};
	MeshStepResult r = call->be.driver->write_response(&call->be, &call->opstate, resp, &merr);

	mesh_forget(call->secret_body);
	call->secret_body = NULL;
	if (continue_op(call, r, 64 * 1024))
		return;
	if (r == MESH_STEP_FAILED)
	{
		reply_error(call, failure_sqlstate(merr.failure),
					psprintf("could not deliver the run token into the workspace of run \"%s\"", call->run_id),
					merr.message, failure_hint(merr.failure));
		return;
	}
	call->ws.token_valid = true;
	wait_for_broker_socket(call->ws.external_ref);
	call->step = STEP_START;	/* now the operation itself */
}

static void
start_operation(WorkerCall *call)
{
	if (!load_backend(call))
		return;
	if (deliver_token_first(call))
		return;
	switch (call->op)
	{
		case MESH_OP_EXEC:
			start_exec(call);
			break;
		case MESH_OP_READ_FILE:
			start_read(call);
			break;
		case MESH_OP_WRITE_FILE:
			start_write(call);
			break;
		default:
			reply_error(call, "XX000", "mesh: unexpected operation", NULL, NULL);
	}
}

/* A call in STEP_START: load the run, then materialize, park or operate. */
static void
advance_call(WorkerCall *call)
{
	ErrorData  *err;

	if (call->op == MESH_OP_ACQUIRE)
	{
		run_declare(call);
		return;
	}
	if (run_is_changing(call->run_id, call))
	{
		call->step = STEP_PARKED;
		return;
	}
	if (!store_load(call->run_id, caller_role(call), &call->ws, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (call->op == MESH_OP_RELEASE)
	{
		start_release(call);
		return;
	}
	if (refuse_unreachable(call))
		return;
	if (strcmp(call->ws.status, "ready") != 0)
		begin_materialize(call);
	else
		start_operation(call);
}

/* An HTTP step of a call finished: route the response. */
static void
complete_transfer(WorkerCall *call)
{
	MeshHttpResponse resp;
	CallStep	step = call->step;
	MeshTransfer *done = call->transfer;

	/* a parser may start the operation's next request: it becomes call->transfer */
	call->transfer = NULL;
	mesh_http_response(done, &resp);
	if (step == STEP_ACQUIRING)
		finish_acquire(call, &resp);
	else if (step == STEP_DELIVERING)
		finish_token_delivery(call, &resp);
	else if (step == STEP_KILLING)
		finish_cancel(call, &resp);
	else if (call->op == MESH_OP_EXEC)
		finish_exec(call, &resp);
	else if (call->op == MESH_OP_READ_FILE)
		finish_read(call, &resp);
	else if (call->op == MESH_OP_WRITE_FILE)
		finish_write(call, &resp);
	else if (call->op == MESH_OP_RELEASE)
		finish_release(call, &resp);
	/* a read's reply sends the file from the response body: keep it until the call ends */
	if (call->op == MESH_OP_READ_FILE && call->step == STEP_FINISHED && call->kept == NULL)
		call->kept = done;
	else
		mesh_http_free(done);
}

/*
 * One pass over all calls.  Returns true when some call can make progress
 * without waiting (so the loop should not sleep).
 */
static bool
advance_all(void)
{
	dlist_mutable_iter iter;
	bool		runnable = false;

	dlist_foreach_modify(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		CHECK_FOR_INTERRUPTS();
		if (call->hdr && pg_atomic_read_u32(&call->hdr->cancelled) && !call->caller_gone)
		{
			call->caller_gone = true;
			if (call->step == STEP_OPERATING && call->op == MESH_OP_EXEC && call->transfer)
				cancel_exec(call);
			else if (call->step == STEP_PARKED || call->step == STEP_START)
				call->step = STEP_FINISHED;
		}
		/* a caller that left while its workspace was being set up gets no command run */
		if (call->step == STEP_START && call->hdr != NULL && call->caller_gone)
			call->step = STEP_FINISHED;
		if (call->step == STEP_START)
			advance_call(call);
		if (call->transfer && mesh_http_is_done(call->transfer))
			complete_transfer(call);
		flush_outbox(call);
		if (call->step == STEP_START)
			runnable = true;
		MemoryContextSwitchTo(old);

		if (call->step == STEP_FINISHED && (call->outbox == NIL || call->caller_gone))
			free_call(call);
	}
	return runnable;
}

/* Can some call move on without waiting for a socket or the latch? */
static bool
any_call_ready(void)
{
	dlist_iter	iter;

	dlist_foreach(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		if (call->step == STEP_START || (call->transfer && mesh_http_is_done(call->transfer)))
			return true;
	}
	return false;
}

/* Ask a backend to kill one exec's command, waiting at most timeout_ms for the answer. */
static void
kill_exec_now(const MeshBackend *be, const char *ref, int64 exec_id, long timeout_ms)
{
	MeshHttpRequest req;
	MeshOpState st = {0};
	MeshHttpResponse resp;
	MeshError	merr = {0};
	MeshStepResult r;

	be->driver->kill_request(be, &st, ref, psprintf(INT64_FORMAT, exec_id), &req);
	do
	{
		mesh_http_blocking(&req, timeout_ms, &resp);
		r = be->driver->kill_response(be, &st, &resp, &merr);
		req = st.next;
		st.step++;
	} while (r == MESH_STEP_NEXT);
	if (r == MESH_STEP_FAILED)
		ereport(LOG, (errmsg("mesh worker %d: could not have exec " INT64_FORMAT " killed: %s",
							 worker_index, exec_id, merr.message)));
}

/*
 * The worker is exiting (shutdown, the postmaster's death, or an error):
 * commands it was running for callers must not run on for nobody.  Their
 * rows are failed by the next start's recovery.  All the kills share one
 * second, so a dying server's worker is gone a second later at most.
 */
static void
worker_exit(int code, Datum arg)
{
	dlist_iter	iter;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);

	mesh_worker_detach_slot(DatumGetInt32(arg));
	dlist_foreach(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);
		long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);

		if (left <= 0)
			break;
		if (call->op == MESH_OP_EXEC && call->step == STEP_OPERATING && call->be.driver)
			kill_exec_now(&call->be, call->ws.external_ref, call->exec_id, left);
	}
}

static void
apply_worker_settings(void)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), "%d", mesh_worker_lock_timeout_ms);
	SetConfigOption("lock_timeout", buf, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * At start: fail the execs this worker's predecessor left running, and ask
 * their backends to kill the commands in case they still run.
 */
static void
recover(void)
{
	ErrorData  *err;
	List	   *interrupted = NIL;
	ListCell   *lc;

	if (!store_recover_after_restart(worker_index, mesh_shared->nworkers, &interrupted, &err))
	{
		ereport(LOG,
				(errmsg("mesh worker %d: recovery skipped: %s", worker_index, err->message)));
		FreeErrorData(err);
		return;
	}
	foreach(lc, interrupted)
	{
		MeshInterruptedExec *ie = lfirst(lc);
		MeshBackend be;

		if (ie->ref && mesh_backend_make(ie->backend, ie->driver, ie->config, ie->credential, &be))
		{
			kill_exec_now(&be, ie->ref, ie->exec_id, 1000);
			json_decref(be.config);
		}
	}
}

void
mesh_worker_main(Datum arg)
{
	worker_index = DatumGetInt32(arg);

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	mesh_worker_connect("mesh worker");
	apply_worker_settings();

	worker_cxt = AllocSetContextCreate(TopMemoryContext, "mesh worker", ALLOCSET_DEFAULT_SIZES);
	install_id = MemoryContextStrdup(worker_cxt,
									 psprintf(UINT64_FORMAT, GetSystemIdentifier()));
	mesh_http_init();
	recover();
	mesh_worker_attach_slot(worker_index);
	before_shmem_exit(worker_exit, Int32GetDatum(worker_index));
	ereport(LOG, (errmsg("mesh worker %d started", worker_index)));

	for (;;)
	{
		WaitEventSet *set;
		WaitEvent	events[64];
		long		timeout;
		bool		runnable;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			apply_worker_settings();
		}
		take_new_calls();
		mesh_http_drive();
		runnable = advance_all();
		/* push new requests onto the wire; finished ones mean another pass */
		if (mesh_http_drive() > 0 || runnable || any_call_ready() || queued_calls_fit())
			continue;

		set = mesh_http_wait_set(&timeout);
		(void) WaitEventSetWait(set, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		FreeWaitEventSet(set);
		ResetLatch(MyLatch);
	}
}
