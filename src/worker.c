/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The mesh worker pool: intake, the loop and the replies.
 *
 * Each worker owns the runs whose run_id hashes to it.  It takes calls from
 * its queue in shared memory (handoff.c), moves each through a small state
 * machine, and overlaps the backend requests of all of them: each call's
 * driver operation is a run of the driver runner (runner.c), whose sockets
 * and timer this loop waits on.  The operations themselves live in
 * worker_acquire.c, worker_exec.c, worker_files.c, worker_release.c,
 * worker_snapshot.c and worker_background.c, described by the table of
 * operations below (worker.h); its start and exit in worker_recover.c.  Between requests
 * it commits the row changes in short transactions of its own (store.c): the
 * row before the backend call, the outcome after it.  Each turn of the loop
 * ends with one WAL flush covering what its calls committed, before any of
 * them replies (send_all): a result is durable before its caller sees it.
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

#include "access/xlog_internal.h"
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
#include "settings.h"
#include "txn.h"
#include "worker.h"
#include "worker_durable.h"

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
	[MESH_OP_ACQUIRE] = {"the call", OP_SCOPE_RUN, run_declare, NULL, NULL},
	[MESH_OP_EXEC] = {"the command", OP_SCOPE_READY_WORKSPACE, start_exec, finish_exec,
	exec_response_limit, exec_start_at_load},
	[MESH_OP_READ_FILE] = {"the file read", OP_SCOPE_READY_WORKSPACE, start_read, finish_read,
	read_response_limit},
	[MESH_OP_WRITE_FILE] = {"the file write", OP_SCOPE_READY_WORKSPACE, start_write, finish_write,
	worker_small_response_limit},
	[MESH_OP_RELEASE] = {"the release", OP_SCOPE_ANY_WORKSPACE, start_release, finish_release,
	worker_small_response_limit},
	[MESH_OP_SNAPSHOT] = {"the snapshot", OP_SCOPE_ANY_WORKSPACE, start_snapshot, finish_snapshot,
	worker_small_response_limit},
	[MESH_OP_EXEC_START] = {"the command", OP_SCOPE_READY_WORKSPACE, start_exec, finish_background,
	background_response_limit, exec_start_at_load},
	[MESH_OP_EXEC_KILL] = {"the kill", OP_SCOPE_ANY_WORKSPACE, start_exec_kill, finish_exec_kill,
	worker_small_response_limit},
	[MESH_OP_EXEC_FOLLOW] = {"following the command", OP_SCOPE_ANY_WORKSPACE, start_follow,
	finish_background, background_response_limit},
	[MESH_OP_EXEC_EXTEND] = {"the extension", OP_SCOPE_ANY_WORKSPACE, start_exec_extend,
	finish_exec_extend, worker_small_response_limit},
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
 * Taking calls
 *--------------------------------------------------------------------------
 */

/* The size of an operation's fixed request struct. */
static Size
request_size(MeshOp op)
{
	switch (op)
	{
		case MESH_OP_ACQUIRE:
			return sizeof(MeshAcquireRequest);
		case MESH_OP_EXEC:
		case MESH_OP_EXEC_START:
			return sizeof(MeshExecRequest);
		case MESH_OP_EXEC_KILL:
			return sizeof(MeshKillRequest);
		case MESH_OP_EXEC_EXTEND:
			return sizeof(MeshExtendRequest);
		case MESH_OP_EXEC_FOLLOW:
			return sizeof(MeshFollowRequest);
		case MESH_OP_READ_FILE:
		case MESH_OP_WRITE_FILE:
			return sizeof(MeshFileRequest);
		case MESH_OP_RELEASE:
			return sizeof(MeshReleaseRequest);
		case MESH_OP_SNAPSHOT:
			return 0;			/* the header alone: the run's id says what to capture */
		default:
			return 0;
	}
}

/*
 * A new call of OP for RUN_ID whose request is MSG; with OWN, the call
 * keeps copies of both (a call the worker makes itself), otherwise they lie
 * in the call segment, mapped while the call lasts.
 */
static WorkerCall *
new_call(MeshOp op, const char *run_id, const char *msg, Size msg_len, bool own)
{
	WorkerCall *call = MemoryContextAllocZero(worker_cxt, sizeof(WorkerCall));

	call->cxt = AllocSetContextCreate(worker_cxt, "mesh call", ALLOCSET_DEFAULT_SIZES);
	call->op = op;
	call->def = worker_op(op);
	call->run_id = own ? MemoryContextStrdup(call->cxt, run_id) : run_id;
	if (own)
		msg = memcpy(MemoryContextAlloc(call->cxt, msg_len), msg, msg_len);
	mesh_msg_parse(msg, msg_len, &call->msg);
	if (call->def)
		memcpy(&call->req, mesh_msg_fixed(&call->msg, request_size(op)), request_size(op));
	call->txn_mark = mesh_txn_time_ns;
	call->step = STEP_START;
	return call;
}

/* Attach a queued call segment; NULL when its caller already gave up. */
static WorkerCall *
attach_call(dsm_handle handle)
{
	MeshCall   *hdr;
	MeshMsg		request;
	const char *blob;
	shm_mq_handle *mqh;
	dsm_segment *seg = mesh_attach_call(handle, &hdr, &request, &blob, &mqh);
	WorkerCall *call;

	if (seg == NULL)
		return NULL;
	call = new_call(hdr->op, hdr->run_id, request.base, request.len, false);
	call->times.handoff_ns = mesh_clock_ns() - hdr->queued_at_ns;
	call->seg = seg;
	call->hdr = hdr;
	call->mqh = mqh;
	call->blob = blob ? blob : "";	/* an empty stdin or file is still one */
	call->blob_len = hdr->blob_len;
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
		if (call->def == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(call->cxt);

			reply_error(call, ERRCODE_INTERNAL_ERROR, "mesh: unexpected operation", NULL, NULL);
			MemoryContextSwitchTo(old);
		}
		else if (call->hdr->database != MyDatabaseId)
		{
			MemoryContext old = MemoryContextSwitchTo(call->cxt);

			reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
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

/*
 * Let go of the caller's side: its queue and its call segment (what the
 * call still needs from them must have been copied first).
 */
static void
release_caller(WorkerCall *call)
{
	/* the queue handle lives in the worker's top context: freed here */
	if (call->mqh)
		shm_mq_detach(call->mqh);
	if (call->seg)
		dsm_detach(call->seg);
	call->mqh = NULL;
	call->seg = NULL;
	call->hdr = NULL;
}

static void
free_call(WorkerCall *call)
{
	/* a read's reply was sent from the last response's body: it goes now */
	mesh_run_end(&call->run);
	if (call->be.config)
		json_decref(call->be.config);
	if (call->env)
		json_decref(call->env);
	dlist_delete(&call->node);
	if (!call->uncounted)
		ncalls--;
	/* a call that sent no reply (the worker's own, or its caller left) ends here */
	mesh_stat_worker_activity(worker_index, call->times.replied_at_ns == 0);
	leave_background_slot(call);
	release_caller(call);
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
	StringInfoData msg;
	MeshReleaseRequest r = {0};

	initStringInfo(&msg);
	mesh_msg_begin(&msg, MESH_MSG_REQUEST, MESH_OP_RELEASE, sizeof(r));
	r.reason = mesh_msg_add_string(&msg, reason);
	mesh_msg_set_fixed(&msg, &r, sizeof(r));
	(void) spawn_internal_call(MESH_OP_RELEASE, run_id, &msg, true);
}

/*
 * A call of OP the worker makes to itself for RUN_ID, with nobody waiting
 * (MSG is copied); COUNTED: among mesh.worker_max_calls, as a caller's.
 */
WorkerCall *
spawn_internal_call(MeshOp op, const char *run_id, StringInfo msg, bool counted)
{
	WorkerCall *call = new_call(op, run_id, msg->data, msg->len, true);

	pfree(msg->data);
	call->caller_gone = true;
	call->uncounted = !counted;
	dlist_push_tail(&calls, &call->node);
	if (counted)
		ncalls++;
	return call;
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

/*
 * mesh_exec_extend moved exec EXEC_ID's deadline BY_MS later: the calls of
 * this worker that carry the command (a foreground exec's request in flight,
 * a background command's follower) wait that much longer for its end.  A
 * run's calls are all this worker's (mesh_worker_for_run), so no other
 * worker has one.
 */
void
extend_calls_of_exec(int64 exec_id, long by_ms)
{
	dlist_iter	iter;

	dlist_foreach(iter, &calls)
	{
		WorkerCall *other = dlist_container(WorkerCall, node, iter.cur);

		if (other->exec_id == exec_id &&
			(other->op == MESH_OP_EXEC || other->op == MESH_OP_EXEC_START ||
			 other->op == MESH_OP_EXEC_FOLLOW))
			exec_call_extended(other, by_ms);
	}
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
	reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
				psprintf("run \"%s\" was materialized by backend \"%s\", which no longer has a usable catalog entry",
						 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "(none)"),
				NULL, "Restore the backend with mesh.backend_add(), or release the workspace by hand.");
	return false;
}

/*
 * A fresh driver run for the call's next operation; returns the driver's
 * state for the request builder, whose reason for refusing goes to
 * call->run.err.
 */
MeshOpState *
begin_op(WorkerCall *call)
{
	memset(&call->out, 0, sizeof(call->out));
	return mesh_run_begin(&call->run, &call->be);
}

/*
 * Send the operation's first request (built false: the builder refused, and
 * the run ends failed at once) and wait for its end in step.  The result
 * goes to out, the step's finish function takes it from there.
 */
void
start_op(WorkerCall *call, CallStep step, bool built, const MeshHttpRequest *req,
		 MeshResponseParser parse, void *out, size_t max_response)
{
	call->http_started = mesh_clock_ns();
	mesh_run_start(&call->run, built, req, parse, out, max_response);
	call->step = step;
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
	MeshWorkspaceStatus status = call->ws.status;

	if (status == MESH_WS_RELEASED || status == MESH_WS_RELEASING)
	{
		reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					psprintf("run \"%s\" has released its workspace", call->run_id),
					NULL, "A released run cannot reach its workspace again; declare a new run.");
		return true;
	}
	if (status == MESH_WS_FAILED)
	{
		bool		budget = call->ws.reason_code == MESH_REASON_BUDGET_EXHAUSTED;

		reply_error(call, budget ? ERRCODE_CONFIGURATION_LIMIT_EXCEEDED : ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
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

/* The operation's start_at_load, as store_load_then calls it. */
static bool
start_at_load(MeshWorkspace *ws, void *arg)
{
	WorkerCall *call = (WorkerCall *) arg;

	Assert(ws == &call->ws);
	return call->def->start_at_load(call);
}

/* A call in STEP_START: load the run, then materialize, park or operate. */
static void
advance_call(WorkerCall *call)
{
	ErrorData  *err;
	XLogRecPtr	written;

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
	if (!store_load_then(call->run_id, caller_role(call), &call->ws,
						 call->def->start_at_load ? start_at_load : NULL, call, &written, &err))
	{
		call->started_at_load = false;	/* rolled back with the load */
		reply_txn_error(call, err);
		return;
	}
	/* the load's transaction writes only an exec's row (start_at_load), kept as its exec needs */
	if (call->started_at_load)
		keep_exec_row(call, written);
	if (call->def->scope == OP_SCOPE_ANY_WORKSPACE)
	{
		call->def->start(call);
		return;
	}
	if (refuse_unreachable(call))
		return;
	if (call->ws.status != MESH_WS_READY)
		begin_materialize(call);
	else
		start_operation(call);
}

/*
 * A request of the call's driver run was answered: the runner parses it and
 * sends the next one, or the run ended and its step's finish takes it.
 */
static void
complete_run(WorkerCall *call)
{
	if (!mesh_run_step(&call->run))
		return;
	call->times.http_ns += mesh_clock_ns() - call->http_started;
	if (call->step == STEP_ACQUIRING)
		finish_acquire(call);
	else if (call->step == STEP_DELIVERING)
		finish_token_delivery(call);
	else if (call->step == STEP_KILLING)
		finish_cancel(call);
	else
		call->def->finish(call);
}

/*
 * Calls of this worker that are not answered yet and not waiting for a
 * flush (their results may still commit), background followers left out:
 * they run for minutes.  Published in the worker's slot each turn, for the
 * other workers' group commit.
 */
static uint32
open_calls(void)
{
	dlist_iter	iter;
	uint32		n = 0;

	dlist_foreach(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		if (call->step != STEP_FINISHED && call->follow == NULL && !call->caller_gone)
			n++;
	}
	return n;
}

/* Send what the calls queued (the turn made durable) and free the calls that ended. */
static void
send_all(uint64 flush_ns)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		worker_flush_outbox(call, flush_ns);
		if (call->step == STEP_FINISHED && (call->outbox == NIL || call->caller_gone))
			free_call(call);
		else if (call->follow && (call->outbox == NIL || call->caller_gone) && call->seg)
		{
			/* a background command's caller has its id: the call follows the command alone */
			detach_follower(call);
			release_caller(call);
			ncalls--;
		}
	}
}

/* Start (or go on with) a call at STEP_START, unless its caller left. */
static void
start_if_due(WorkerCall *call)
{
	/* a caller that left while its workspace was being set up gets no command run */
	if (call->step == STEP_START && call->hdr != NULL && call->caller_gone)
		call->step = STEP_FINISHED;
	if (call->step == STEP_START)
		advance_call(call);
}

/*
 * Move one call on as far as it goes without waiting.  Returns true when it
 * can go on at once (STEP_START again).
 */
static bool
advance_one(WorkerCall *call)
{
	MemoryContext old = MemoryContextSwitchTo(call->cxt);
	bool		runnable;

	CHECK_FOR_INTERRUPTS();
	call->txn_mark = mesh_txn_time_ns;
	if (call->hdr && pg_atomic_read_u32(&call->hdr->cancelled) && !call->caller_gone)
	{
		call->caller_gone = true;
		if (call->step == STEP_OPERATING && call->op == MESH_OP_EXEC && call->run.active)
			cancel_exec(call);
		else if (call->step == STEP_PARKED || call->step == STEP_START)
			call->step = STEP_FINISHED;
	}
	start_if_due(call);
	if (call->step == STEP_AWAITING_BROKER && broker_listening(call))
		call->step = STEP_START;
	if (call->step == STEP_FOLLOW_PAUSED)
		follow_when_due(call, GetCurrentTimestamp());
	if (mesh_run_ready(&call->run))
	{
		complete_run(call);
		/* a workspace just set up: the command starts in this turn, under its one flush */
		start_if_due(call);
	}
	worker_settle_txn_time(call);
	runnable = call->step == STEP_START;
	MemoryContextSwitchTo(old);
	return runnable;
}

/* The followers' turn was given up to the calls' answers last time. */
static bool followers_deferred = false;

/*
 * One pass over all calls.  Returns true when some call can make progress
 * without waiting (so the loop should not sleep).  Callers first: a
 * background command's follower stores output in transactions of its own,
 * which would hold up the turn's flush and replies, so when a caller's call
 * ended in this pass the followers wait for the next turn, one turn at most
 * (the loop does not sleep while their answers are ready).
 */
static bool
advance_all(void)
{
	dlist_mutable_iter iter;
	bool		runnable = false;
	bool		answered = false;

	dlist_foreach_modify(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);
		bool		was_finished = call->step == STEP_FINISHED;

		if (call->follow != NULL)
			continue;
		if (advance_one(call))
			runnable = true;
		if (!was_finished && call->step == STEP_FINISHED && !call->caller_gone)
			answered = true;
	}
	if (answered && !followers_deferred)
	{
		followers_deferred = true;
		return runnable;
	}
	followers_deferred = false;
	dlist_foreach_modify(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		if (call->follow == NULL)
			continue;
		if (advance_one(call))
			runnable = true;
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

		if (call->step == STEP_START || mesh_run_ready(&call->run))
			return true;
	}
	return false;
}

/*
 * Until when the loop may sleep for the calls' own sake: the earliest
 * broker wait's end (-1: none).  curl's timer is the other bound.
 */
static long
calls_timeout(void)
{
	dlist_iter	iter;
	long		timeout = -1;
	TimestampTz now = GetCurrentTimestamp();

	dlist_foreach(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);
		long		left;

		if (call->step != STEP_AWAITING_BROKER && call->step != STEP_FOLLOW_PAUSED)
			continue;
		left = Max((long) ((call->wait_until - now + 999) / 1000), 0L);
		if (timeout < 0 || left < timeout)
			timeout = left;
	}
	return timeout;
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
	List	   *kills = NIL;

	mesh_worker_detach_slot(DatumGetInt32(arg));
	dlist_foreach(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		if (call->op == MESH_OP_EXEC && call->step == STEP_OPERATING && call->be.driver)
			kills = lappend(kills, start_kill(&call->be, call->ws.external_ref, call->exec_id));
	}
	await_kills(kills, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000));
}

static void
apply_worker_settings(void)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), "%d", mesh_worker_lock_timeout_ms);
	SetConfigOption("lock_timeout", buf, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * This process's own copy of wal_writer_delay paces only the flushes
	 * XLogBackgroundFlush makes here (mesh_write_to, which wants the write
	 * alone); the WAL writer keeps the server's.  At the server's 200 ms,
	 * every exec after a pause of that length would flush its row before its
	 * request, the flush the design spares it.
	 */
	SetConfigOption("wal_writer_delay", "10s", PGC_SIGHUP, PGC_S_OVERRIDE);
}

/* a background worker's entry point, named in its registration (mesh_exec.c) */
PGDLLEXPORT void mesh_worker_main(Datum arg);

void
mesh_worker_main(Datum arg)
{
	uint64		flushes_counted = 0;	/* of mesh_txn_wal_flushes, in mesh.stat_workers */
	WaitEventSet *set;

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
	worker_recover();
	spawn_followers();
	mesh_worker_attach_slot(worker_index);
	mesh_stat_worker_woke(worker_index);
	before_shmem_exit(worker_exit, Int32GetDatum(worker_index));
	ereport(LOG, (errmsg("mesh worker %d started", worker_index)));

	/* the latch, the postmaster, and every socket curl waits on, behind one descriptor */
	set = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(set, WL_SOCKET_READABLE, mesh_http_socket(), NULL, NULL);

	for (;;)
	{
		WaitEvent	events[3];
		long		timeout;
		long		calls_wait;
		bool		runnable;
		int			completed;
		uint64		flush_ns;
		bool		may_reply;
		long		gather_wait;

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
		/* make the turn's commits durable, then push new requests onto the wire and reply */
		flush_ns = worker_make_turn_durable(worker_index, open_calls(), &may_reply);
		if (exec_ended_this_turn)
		{
			/* mesh_exec_wait's callers look again, now that the ends are on disk */
			exec_ended_this_turn = false;
			ConditionVariableBroadcast(&mesh_shared->exec_ended);
		}
		completed = mesh_http_drive();
		if (may_reply)
			send_all(flush_ns);
		mesh_stat_worker_turn(worker_index, ncalls, mesh_txn_wal_flushes - flushes_counted);
		flushes_counted = mesh_txn_wal_flushes;
		pg_atomic_write_u32(&mesh_shared->workers[worker_index].open_calls, open_calls());
		/* finished requests mean another pass */
		if (completed > 0 || runnable || any_call_ready() || queued_calls_fit())
			continue;

		timeout = mesh_http_timeout();
		calls_wait = calls_timeout();
		if (calls_wait >= 0 && (timeout < 0 || calls_wait < timeout))
			timeout = calls_wait;
		gather_wait = worker_gather_timeout();
		if (gather_wait >= 0 && (timeout < 0 || gather_wait < timeout))
			timeout = gather_wait;
		/*
		 * About to sleep: report what the statistics still hold (a turn's
		 * flush comes after its transactions' reports), at most once a
		 * second, so an idle worker's WAL flushes reach pg_stat_wal.
		 */
		timeout = mesh_wait_for_stats(timeout);
		(void) WaitEventSetWait(set, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		mesh_stat_worker_woke(worker_index);
		ResetLatch(MyLatch);
	}
}
