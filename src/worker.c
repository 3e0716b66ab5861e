/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The mesh worker pool: intake, the loop and the replies.
 *
 * Each worker owns the runs whose run_id hashes to it.  It takes calls from
 * its queue in shared memory (handoff.c), moves each through a small state
 * machine, and overlaps the HTTP waits of all of them with libcurl multi
 * (worker_http.c).  The operations themselves live in worker_acquire.c,
 * worker_exec.c, worker_files.c and worker_release.c, described by the table
 * of operations below (worker.h).  Between HTTP steps it commits the row changes in short
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

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "handoff.h"
#include "mesh_exec.h"
#include "txn.h"
#include "worker.h"

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
int			worker_index;
char	   *worker_install_id;

/*--------------------------------------------------------------------------
 * The operations
 *--------------------------------------------------------------------------
 */

/* Replies of a few hundred bytes: a write's, a release's, a kill's. */
size_t
worker_small_response_limit(WorkerCall *call)
{
	return 64 * 1024;
}

static const WorkerOpDef op_defs[] = {
	[MESH_OP_ACQUIRE] = {"the call", OP_SCOPE_RUN, run_declare, NULL, NULL, false},
	[MESH_OP_EXEC] = {"the command", OP_SCOPE_READY_WORKSPACE, start_exec, finish_exec,
	exec_response_limit, false},
	[MESH_OP_READ_FILE] = {"the file read", OP_SCOPE_READY_WORKSPACE, start_read, finish_read,
	read_response_limit, true},
	[MESH_OP_WRITE_FILE] = {"the file write", OP_SCOPE_READY_WORKSPACE, start_write, finish_write,
	worker_small_response_limit, false},
	[MESH_OP_RELEASE] = {"the release", OP_SCOPE_ANY_WORKSPACE, start_release, finish_release,
	worker_small_response_limit, false},
	[MESH_OP_SNAPSHOT] = {"the snapshot", OP_SCOPE_ANY_WORKSPACE, start_snapshot, finish_snapshot,
	worker_small_response_limit, false},
};

/* The definition of an operation a worker performs; NULL for any other. */
const WorkerOpDef *
worker_op(MeshOp op)
{
	if ((int) op < 0 || (int) op >= (int) lengthof(op_defs) || op_defs[op].start == NULL)
		return NULL;
	return &op_defs[op];
}

/*--------------------------------------------------------------------------
 * Replies
 *--------------------------------------------------------------------------
 */

/*
 * Queue a message for the caller; sent by flush_outbox().  The blob is not
 * copied: it must live as long as the call (a read's body is kept with its
 * transfer, see complete_transfer).
 */
void
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

void
reply_ok(WorkerCall *call, json_t *doc, const char *blob, Size blob_len)
{
	queue_message(call, doc, blob, blob_len);
	call->step = STEP_FINISHED;
}

void
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
void
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
const char *
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

const char *
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

/*
 * A backend's refusal, in the caller's terms: what failed (what, or the
 * call's operation when NULL), for which run, and the backend's own words;
 * its HTTP status and error code go to the detail.  Without an answer
 * (unreachable) the transport's words say it.
 */
void
reply_backend_error(WorkerCall *call, const char *what, const MeshError *err)
{
	if (err->reason == NULL)
		reply_error(call, failure_sqlstate(err->failure), err->message, NULL,
					failure_hint(err->failure));
	else
		reply_error(call, failure_sqlstate(err->failure),
					psprintf("%s of run \"%s\" failed on backend \"%s\": %s", what ? what : call->def->noun,
							 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "?",
							 err->reason),
					err->message, failure_hint(err->failure));
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
	call->def = worker_op(hdr->op);
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
		else if (call->def == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(call->cxt);

			reply_error(call, "XX000", "mesh: unexpected operation", NULL, NULL);
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
void
spawn_internal_release(const char *run_id, const char *reason)
{
	WorkerCall *call = MemoryContextAllocZero(worker_cxt, sizeof(WorkerCall));

	call->cxt = AllocSetContextCreate(worker_cxt, "mesh internal call", ALLOCSET_DEFAULT_SIZES);
	call->op = MESH_OP_RELEASE;
	call->def = worker_op(MESH_OP_RELEASE);
	call->req = json_pack("{s:s,s:s?}", "run_id", run_id, "reason", reason);
	call->run_id = json_string_value(json_object_get(call->req, "run_id"));
	call->caller_gone = true;
	call->step = STEP_START;
	dlist_push_tail(&calls, &call->node);
	ncalls++;
}

/*--------------------------------------------------------------------------
 * What the operations share
 *--------------------------------------------------------------------------
 */

/*
 * Is another call of this run changing its workspace's state right now
 * (materializing or releasing it)?  Such changes are exclusive: the run's
 * other calls wait, parked, and start over when it ends.
 */
bool
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
void
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

bool
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

void
start_transfer(WorkerCall *call, MeshHttpRequest *req, size_t max_response)
{
	call->transfer = mesh_http_start(req, max_response, call);
}

/* A fresh driver state for the next operation of this call. */
MeshOpState *
begin_op(WorkerCall *call)
{
	memset(&call->opstate, 0, sizeof(call->opstate));
	return &call->opstate;
}

/*
 * A parser asked for another request: send it and stay in the same step.
 * Returns true when that happened, so the caller stops here.
 */
bool
continue_op(WorkerCall *call, MeshStepResult r, size_t max_response)
{
	if (r != MESH_STEP_NEXT)
		return false;
	call->opstate.step++;
	start_transfer(call, &call->opstate.next, max_response);
	return true;
}

/*
 * Whether the workspace's recorded capabilities include NAME.  Capabilities
 * are recorded when the workspace is materialized; a workspace without them
 * (or with unreadable ones) has none: absent means absent (invariant 6).
 */
bool
workspace_has_capability(WorkerCall *call, const char *name)
{
	json_t	   *caps = call->ws.capabilities ? json_loads(call->ws.capabilities, 0, NULL) : NULL;
	bool		has = caps != NULL && json_is_true(json_object_get(caps, name));

	if (caps)
		json_decref(caps);
	return has;
}

/*
 * The role that made the call (an oid, as text), which a run belongs to
 * when it declares it; NULL for the pool's own calls (reaper releases).
 */
const char *
caller_role(WorkerCall *call)
{
	if (call->hdr == NULL || !OidIsValid(call->hdr->user))
		return NULL;
	return psprintf("%u", call->hdr->user);
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

static void
start_operation(WorkerCall *call)
{
	if (!load_backend(call))
		return;
	if (deliver_token_first(call))
		return;
	call->def->start(call);
}

/*--------------------------------------------------------------------------
 * The state machine
 *--------------------------------------------------------------------------
 */

/* A call in STEP_START: load the run, then materialize, park or operate. */
static void
advance_call(WorkerCall *call)
{
	ErrorData  *err;

	if (call->def->scope == OP_SCOPE_RUN)
	{
		call->def->start(call);
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
	if (call->def->scope == OP_SCOPE_ANY_WORKSPACE)
	{
		call->def->start(call);
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
	else
		call->def->finish(call, &resp);
	/* a read's reply sends the file from the response body: keep it until the call ends */
	if (call->def->reply_sends_body && call->step == STEP_FINISHED && call->kept == NULL)
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
	worker_install_id = MemoryContextStrdup(worker_cxt,
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
