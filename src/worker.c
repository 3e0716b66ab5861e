/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The mesh worker pool: intake, the loop, and the table of operations.
 *
 * Each worker owns the runs whose run_id hashes to it.  It takes calls from
 * its queue in shared memory (handoff.c), moves each through a small state
 * machine, and overlaps the backend requests of all of them: each call's
 * driver operation is a run of the driver runner (runner.c), whose sockets
 * and timer this loop waits on.  The loop knows the operations only by the
 * table below, one WorkerOpDef each (worker_op.h): the files that perform
 * them (worker_exec.c, worker_background.c, worker_files.c,
 * worker_release.c, worker_snapshot.c) fill its rows; a call on a
 * workspace passes the stage that makes it usable first (worker_acquire.c);
 * the calls' records and their driver runs are worker_call.c's, whose end
 * each operation names (on_end).  Its start and exit: worker_recover.c.
 * Between requests it commits the row changes in short transactions of its
 * own (store.c): the row before the backend call, the outcome after it.  Each turn of the loop
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
#include "worker_acquire.h"
#include "worker_background.h"
#include "worker_call.h"
#include "worker_durable.h"
#include "worker_exec.h"
#include "worker_files.h"
#include "worker_recover.h"
#include "worker_release.h"
#include "worker_reply.h"
#include "worker_snapshot.h"

/*--------------------------------------------------------------------------
 * The operations
 *--------------------------------------------------------------------------
 */

static const WorkerOpDef op_defs[] = {
	[MESH_OP_ACQUIRE] = {
		.noun = "the call", .scope = OP_SCOPE_RUN,
		.start = run_declare},
	[MESH_OP_EXEC] = {
		.noun = "the command", .scope = OP_SCOPE_READY_WORKSPACE,
		.start = start_exec, .finish = finish_exec,
		.start_at_load = exec_start_at_load, .cancel = cancel_exec},
	[MESH_OP_READ_FILE] = {
		.noun = "the file read", .scope = OP_SCOPE_READY_WORKSPACE,
		.start = start_read, .finish = finish_read},
	[MESH_OP_WRITE_FILE] = {
		.noun = "the file write", .scope = OP_SCOPE_READY_WORKSPACE,
		.start = start_write, .finish = finish_write},
	[MESH_OP_RELEASE] = {
		.noun = "the release", .scope = OP_SCOPE_ANY_WORKSPACE, .exclusive = true,
		.start = start_release, .finish = finish_release},
	[MESH_OP_SNAPSHOT] = {
		.noun = "the snapshot", .scope = OP_SCOPE_ANY_WORKSPACE,
		.start = start_snapshot, .finish = finish_snapshot},
	/* a background command starts as an exec does; its end is followed */
	[MESH_OP_EXEC_START] = {
		.noun = "the command", .scope = OP_SCOPE_READY_WORKSPACE,
		.start = start_exec, .finish = finish_background,
		.start_at_load = exec_start_at_load},
	[MESH_OP_EXEC_KILL] = {
		.noun = "the kill", .scope = OP_SCOPE_ANY_WORKSPACE,
		.start = start_exec_kill},
	[MESH_OP_EXEC_FOLLOW] = {
		.noun = "following the command", .scope = OP_SCOPE_ANY_WORKSPACE,
		.start = start_follow, .finish = finish_background},
	[MESH_OP_EXEC_EXTEND] = {
		.noun = "the extension", .scope = OP_SCOPE_ANY_WORKSPACE,
		.start = start_exec_extend},
};

/* The definition of an operation a worker performs; NULL for any other. */
static const WorkerOpDef *
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

	while (worker_ncalls < mesh_worker_max_calls && mesh_worker_pop(worker_index, &handle))
	{
		WorkerCall *call = worker_call_attach(handle);

		if (call == NULL)
			continue;
		call->def = worker_op(call->op);
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
		worker_call_add(call);
	}
}

/* Calls are waiting in the queue and there is room to take them now. */
static bool
queued_calls_fit(void)
{
	return worker_ncalls < mesh_worker_max_calls && mesh_worker_has_queued(worker_index);
}

/*--------------------------------------------------------------------------
 * The state machine
 *--------------------------------------------------------------------------
 */

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
	/* the load's transaction wrote the operation's first rows (start_at_load): its start keeps them */
	call->load_lsn = written;
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
 * sends the next one, or the run ended and the function its start named
 * (on_end) takes it.
 */
static void
complete_run(WorkerCall *call)
{
	if (!mesh_run_step(&call->run))
		return;
	call->times.http_ns += mesh_clock_ns() - call->http_started;
	call->on_end(call);
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

	dlist_foreach(iter, &worker_calls)
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

	dlist_foreach_modify(iter, &worker_calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		worker_flush_outbox(call, flush_ns);
		if (call->step == STEP_FINISHED && (call->outbox == NIL || call->caller_gone))
			worker_call_free(call);
		else if (call->follow && (call->outbox == NIL || call->caller_gone) && call->seg)
			worker_call_detach_caller(call);	/* the caller has its exec id */
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
	/* a call the worker made itself (worker_call.c) learns here what its operation is */
	if (call->def == NULL)
		call->def = worker_op(call->op);
	if (call->hdr && pg_atomic_read_u32(&call->hdr->cancelled) && !call->caller_gone)
	{
		call->caller_gone = true;
		if (call->step == STEP_OPERATING && call->def->cancel && call->run.active)
			call->def->cancel(call);
		else if (call->step == STEP_PARKED || call->step == STEP_START)
			call->step = STEP_FINISHED;
	}
	start_if_due(call);
	if (call->step == STEP_AWAITING_BROKER && broker_listening(call))
		call->step = STEP_START;
	if (call->step == STEP_FOLLOW_PAUSED && GetCurrentTimestamp() >= call->wait_until)
		call->on_due(call);
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

	dlist_foreach_modify(iter, &worker_calls)
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
	dlist_foreach_modify(iter, &worker_calls)
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

	dlist_foreach(iter, &worker_calls)
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

	dlist_foreach(iter, &worker_calls)
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
	dlist_foreach(iter, &worker_calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		/* an operation that stops its work when its caller leaves would leave it running */
		if (call->def && call->def->cancel && call->step == STEP_OPERATING && call->be.driver)
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

	worker_calls_init(DatumGetInt32(arg));

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	mesh_worker_connect("mesh worker");
	apply_worker_settings();

	mesh_http_init();
	worker_recover();
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
		mesh_stat_worker_turn(worker_index, worker_ncalls, mesh_txn_wal_flushes - flushes_counted);
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
