/*-------------------------------------------------------------------------
 *
 * worker_acquire.c
 *	  The mesh worker's operations that make a workspace usable.
 *
 * Declaring a run (no backend call), materializing its workspace on the
 * backend or waking a stopped one, delivering the run token before a run
 * with grants works there, and the tier climb after an out-of-memory kill.
 * A run's state changes are exclusive: its other calls wait, parked
 * (run_is_changing, wake_parked in worker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <sys/stat.h>

#include "credentials.h"
#include "worker.h"

void
run_declare(WorkerCall *call)
{
	char	   *row_json;
	ErrorData  *err;
	json_t	   *from_snapshot = json_object_get(call->req, "from_snapshot");

	if (!store_declare(call->run_id,
					   json_string_value(json_object_get(call->req, "agent_id")),
					   json_string_value(json_object_get(call->req, "actor_id")),
					   json_string_value(json_object_get(call->req, "parent_run_id")),
					   json_string_value(json_object_get(call->req, "environment")),
					   caller_role(call),
					   json_string_value(json_object_get(call->req, "project")),
					   json_is_integer(from_snapshot)
					   ? psprintf("%lld", (long long) json_integer_value(from_snapshot)) : NULL,
					   &row_json, &err))
		reply_txn_error(call, err);
	else
		reply_ok(call, json_pack("{s:s}", "row", row_json), NULL, 0);
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
	/* what a new workspace's /workspace starts from (a wake keeps its own) */
	st->snapshot = call->ws.snapshot_ref;
	call->be.driver->acquire_request(&call->be, st, call->ws.external_ref, size,
									 worker_install_id, &req);
	start_transfer(call, &req, 1024 * 1024);
	call->step = STEP_ACQUIRING;
}

/*
 * The backend says the workspace is not running (its sandbox stopped: the
 * server or the daemon restarted).  Acquire wakes it with its files; then
 * the call starts over.  Once per call, so a failing wake cannot loop.
 */
bool
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

void
begin_materialize(WorkerCall *call)
{
	ErrorData  *err;

	if (strcmp(call->ws.status, "pending") == 0 && call->ws.external_ref == NULL)
	{
		if (!store_begin_materialize(&call->ws, worker_install_id, &err))
		{
			reply_txn_error(call, err);
			return;
		}
		queue_message(call,
					  json_pack("{s:s}", "notice",
								psprintf("mesh: setting up a sandbox for run \"%s\" on backend \"%s\" (%s); the first call takes a moment",
										 call->run_id, call->ws.backend_kind,
										 call->ws.snapshot_notice)),
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
	/* else: acquiring left over from a crash: the same idempotent acquire, on the same snapshot */
	else if (!store_snapshot_ref_of(&call->ws, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	start_acquire(call);
}

void
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

/* A token was minted: the broker starts listening for its workspace. */
void
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
bool
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
	start_transfer(call, &req, worker_small_response_limit(call));
	call->secret_body = content;	/* curl sends from it; wiped once sent */
	call->step = STEP_DELIVERING;
	return true;
}

void
finish_token_delivery(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshError	merr = {0};
	MeshStepResult r = call->be.driver->write_response(&call->be, &call->opstate, resp, &merr);

	mesh_forget(call->secret_body);
	call->secret_body = NULL;
	if (continue_op(call, r, worker_small_response_limit(call)))
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

/*
 * The command ran out of memory: its agent's next runs get a larger tier
 * (once per run), and the caller is told what happened to the tier.
 */
void
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
