/*-------------------------------------------------------------------------
 *
 * worker_acquire.c
 *	  The mesh worker's operations that make a workspace usable.
 *
 * Declaring a run (no backend call), materializing its workspace on the
 * backend or waking a stopped one, delivering the run token before a run
 * with grants works there, and the tier climb after an out-of-memory kill.
 * A run's state changes are exclusive: its other calls wait, parked
 * (run_is_changing in worker_call.c), and go on when the change ends
 * (wake_parked).  The loop (worker.c) sends every call that needs a ready
 * workspace through here first: this is the stage below the operations.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <sys/stat.h>

#include "credentials.h"
#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_durable.h"
#include "worker_failures.h"
#include "worker_reply.h"

/*
 * Declare the run.  The reply is the mesh.workspaces row as the statement
 * returned it, a composite datum the caller returns as it is: encoded once.
 */
void
run_declare(WorkerCall *call)
{
	const MeshAcquireRequest *r = &call->req.acquire;
	Datum		row;
	ErrorData  *err;

	if (!store_declare(call->run_id,
					   mesh_msg_string(&call->msg, r->agent_id),
					   mesh_msg_string(&call->msg, r->actor_id),
					   mesh_msg_string(&call->msg, r->parent_run_id),
					   mesh_msg_string(&call->msg, r->environment),
					   caller_role(call),
					   mesh_msg_string(&call->msg, r->project),
					   r->has_from_snapshot ? &r->from_snapshot : NULL,
					   &row, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	reply_row(call, row);
}

/* A state change ended: parked calls of the run start over, or fail alike. */
void
wake_parked(const char *run_id, const MeshError *failed)
{
	dlist_iter	iter;

	dlist_foreach(iter, &worker_calls)
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

/* The call's backend, from the catalog entry its workspace names; false: replied. */
bool
load_backend(WorkerCall *call)
{
	if (call->be.driver)
		return true;
	if (mesh_backend_from_workspace(&call->ws, &call->be))
		return true;
	reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
				psprintf("run \"%s\" was materialized by backend \"%s\", which no longer has a usable catalog entry",
						 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "(none)"),
				NULL, "Restore the backend with mesh.backend_add(), or release the workspace by hand.");
	return false;
}

static void finish_acquire(WorkerCall *call);
static void finish_token_delivery(WorkerCall *call);

/* Ask the recorded backend to create (or wake) the workspace. */
static void
start_acquire(WorkerCall *call)
{
	MeshHttpRequest req;
	MeshAcquireSpec spec = {MESH_SIZE_STANDARD, worker_install_id, call->ws.egress,
	call->ws.snapshot_ref};
	MeshOpState *st;
	bool		built;

	if (!load_backend(call))
		return;
	(void) mesh_size_parse(call->ws.size ? call->ws.size : "standard", &spec.size);
	/*
	 * spec.egress is the creation-time policy, also on a wake: policy changes
	 * never retrofit; spec.snapshot is what a new /workspace starts from.
	 */
	st = begin_op(call);
	built = call->be.driver->acquire_request(&call->be, st, call->ws.external_ref, &spec, &req,
											 &call->run.err);
	start_op(call, STEP_ACQUIRING, built, &req, mesh_parse_acquire, &call->out.caps, 1024 * 1024,
			 finish_acquire);
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

/* The capability the call cannot do without, checked on the backend before it is asked. */
static const char *
capability_needed(WorkerCall *call)
{
	if (call->op == MESH_OP_EXEC || call->op == MESH_OP_EXEC_START)
		return call->req.exec.eval ? "eval" : "shell";
	return NULL;
}

void
begin_materialize(WorkerCall *call)
{
	ErrorData  *err;

	if (call->ws.status == MESH_WS_PENDING && call->ws.external_ref == NULL)
	{
		/*
		 * Deferred, flushed before this turn of the loop sends anything
		 * (worker_want_durable), with every other commit of the turn: a crash
		 * before the flush can leave a sandbox no row names, which
		 * reconciliation releases as an orphan (docs/design.md, invariant 4).
		 */
		if (!store_begin_materialize(&call->ws, worker_install_id, capability_needed(call),
									 MESH_COMMIT_DEFERRED, &err))
		{
			reply_txn_error(call, err);
			return;
		}
		worker_want_durable(mesh_txn_commit_lsn());
		/* an evaluation's backend sets up no sandbox: no files, no project to start from */
		if (call->op == MESH_OP_EXEC && call->req.exec.eval)
			queue_notice(call,
						 psprintf("mesh: run \"%s\" evaluates on backend \"%s\": no sandbox is set up, each evaluation runs in an isolate of its own",
								  call->run_id, call->ws.backend_kind));
		else
			queue_notice(call,
						 psprintf("mesh: setting up a sandbox for run \"%s\" on backend \"%s\" (%s); the first call takes a moment",
								  call->run_id, call->ws.backend_kind,
								  call->ws.snapshot_notice));
	}
	else if (call->ws.status == MESH_WS_PENDING)
	{
		/* hibernated, or an interrupted acquire: acquire again, on the backend and under the name it has */
		bool		interrupted = call->ws.reason_code == MESH_REASON_ACQUIRE_INTERRUPTED;
		/* a resumed run's reason says whose workspace it wakes (mesh.workspace_resume) */
		const char *resumed = call->ws.status_reason != NULL &&
			strncmp(call->ws.status_reason, "resumes ", 8) == 0 ? call->ws.status_reason : NULL;

		/* the row already names the sandbox: deferred, flushed with the turn, as above */
		if (!store_begin_wake(&call->ws, MESH_COMMIT_DEFERRED, &err))
		{
			reply_txn_error(call, err);
			return;
		}
		worker_want_durable(mesh_txn_commit_lsn());
		if (resumed)
			queue_notice(call, psprintf("mesh: run \"%s\" %.*s: waking it on backend \"%s\"", call->run_id,
										(int) strcspn(resumed, ";"), resumed, call->ws.backend_kind));
		else
			queue_notice(call,
						 psprintf(interrupted ? "mesh: setting up the sandbox of run \"%s\" on backend \"%s\" again (the last try was interrupted)"
								  : "mesh: waking the hibernated workspace of run \"%s\" on backend \"%s\"",
								  call->run_id, call->ws.backend_kind));
	}
	/*
	 * else: acquiring left over from a crash: the same idempotent acquire.
	 * A repeated acquire (a wake, an interrupted one) names the snapshot the
	 * row says the workspace stands on: a backend that no longer has the
	 * workspace makes it again on the same snapshot, never empty; one that
	 * has it keeps it.
	 */
	start_acquire(call);
}

/* The acquisition's end: the workspace is recorded ready, or failed. */
static void
finish_acquire(WorkerCall *call)
{
	MeshError	merr = call->run.err;
	ErrorData  *err;

	if (call->run.result == MESH_STEP_FAILED)
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
	/*
	 * Deferred, and written before this turn of the loop sends anything; on
	 * disk with the turn's flush, the first exec's result's or the WAL
	 * writer's.  Until then only the host failing could lose the move, and
	 * the row still names the sandbox (acquiring, with its reference): the
	 * run's next call acquires again, idempotently, and the backend answers
	 * with the sandbox it has (docs/design.md, invariant 4).
	 */
	if (!store_materialized(&call->ws, &call->out.caps, MESH_COMMIT_DEFERRED, &err))
	{
		call->step = STEP_START;
		reply_txn_error(call, err);
		wake_parked(call->run_id, NULL);
		return;
	}
	worker_want_written(mesh_txn_commit_lsn());
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
 * The broker listens for a workspace a moment after its token is minted
 * (woken by wake_broker, it wakes the workers when it listened); the
 * command must not run before it does.  Bounded by call->wait_until: a
 * broker that is down only means the sandbox's exchange is refused,
 * visibly.  True when the call may go on.
 */
bool
broker_listening(WorkerCall *call)
{
	struct stat st;

	return mesh_shared->broker_procno < 0 || GetCurrentTimestamp() >= call->wait_until ||
		stat(mesh_broker_socket_path(call->ws.external_ref), &st) == 0;
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
	bool		built;

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
	built = call->be.driver->write_request(&call->be, begin_op(call), call->ws.external_ref,
										   MESH_TOKEN_PATH, 0600, content, strlen(content), &req,
										   &call->run.err);
	start_op(call, STEP_DELIVERING, built, &req, mesh_parse_write, NULL,
			 worker_small_response_limit(call), finish_token_delivery);
	call->secret_body = content;	/* curl sends from it; wiped once sent */
	return true;
}

/* The token is in the workspace: the operation goes on once the broker listens. */
static void
finish_token_delivery(WorkerCall *call)
{
	MeshError	merr = call->run.err;

	mesh_forget(call->secret_body);
	call->secret_body = NULL;
	if (call->run.result == MESH_STEP_FAILED)
	{
		reply_error(call, failure_sqlerrcode(merr.failure),
					psprintf("could not deliver the run token into the workspace of run \"%s\"", call->run_id),
					merr.message, failure_hint(merr.failure));
		return;
	}
	call->ws.token_valid = true;
	/* then the operation itself, once the broker listens */
	call->wait_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 500);
	call->step = STEP_AWAITING_BROKER;
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
		queue_notice(call, psprintf("mesh: the command ran out of memory in the workspace of run \"%s\"; %s",
									call->run_id, what));
}
