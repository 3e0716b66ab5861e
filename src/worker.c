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
 * A message for the caller: the typed message (calls.h), then the blob (a file's bytes)
 * sent from where it already lies, so a file is not copied into the message.
 */
typedef struct OutMessage
{
	StringInfo	head;
	const char *blob;
	Size		blob_len;
	bool		final;			/* the reply or error: stamped with the call's times when sent */
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

/* The time spent in transactions since the last mark is this call's. */
static void
settle_txn_time(WorkerCall *call)
{
	call->times.worker_txn_ns += mesh_txn_time_ns - call->txn_mark;
	call->txn_mark = mesh_txn_time_ns;
}

/*
 * Queue a built message for the caller; sent by flush_outbox().  The blob
 * is not copied: it must live as long as the call (a read's body is kept
 * with the driver run's last response, see free_call).
 */
static void
queue_message(WorkerCall *call, StringInfo head, const char *blob, Size blob_len, bool final)
{
	OutMessage *msg = palloc(sizeof(OutMessage));

	msg->head = head;
	msg->blob = blob;
	msg->blob_len = blob_len;
	msg->final = final;
	call->outbox = lappend(call->outbox, msg);
}

/* A NOTICE for the caller, raised there while it keeps waiting. */
void
queue_notice(WorkerCall *call, const char *text)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_notice(head, call->op, text);
	queue_message(call, head, NULL, 0, false);
}

/* A reply of the call's operation, its fixed struct still to be set. */
StringInfo
begin_reply(WorkerCall *call, Size fixed_size)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_begin(head, MESH_MSG_REPLY, call->op, fixed_size);
	return head;
}

/* Queue the call's final message (a reply or an error); its timings go with it when sent. */
void
finish_with(WorkerCall *call, StringInfo head, const char *blob, Size blob_len)
{
	settle_txn_time(call);
	queue_message(call, head, blob, blob_len, true);
	call->step = STEP_FINISHED;
}

/*
 * A reply that is a row (declare's mesh.workspaces, a capture's
 * mesh.snapshots), as the composite datum the statement returned: encoded
 * once, returned by the caller as it is.
 */
void
reply_row(WorkerCall *call, Datum row)
{
	StringInfo	head = begin_reply(call, sizeof(MeshRowReply));
	MeshRowReply r;

	r.row = mesh_msg_add_bytes(head, DatumGetPointer(row), VARSIZE(DatumGetPointer(row)));
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, NULL, 0);
}

/* A reply without fields (a file write's). */
void
reply_done(WorkerCall *call)
{
	finish_with(call, begin_reply(call, 0), NULL, 0);
}

void
reply_error(WorkerCall *call, int sqlerrcode, const char *message,
			const char *detail, const char *hint)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_error(head, call->op, sqlerrcode, message, detail, hint);
	finish_with(call, head, NULL, 0);
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
		reply_error(call, ERRCODE_LOCK_NOT_AVAILABLE,
					psprintf("mesh worker could not lock the workspace of run \"%s\" within mesh.worker_lock_timeout",
							 call->run_id),
					"Another transaction holds a lock on mesh's tables.",
					"If the calling transaction itself locked mesh tables, commit or roll it back before calling mesh functions.");
	else
		reply_error(call, err->sqlerrcode, err->message, err->detail, err->hint);
	FreeErrorData(err);
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
		reply_error(call, failure_sqlerrcode(err->failure), err->message, NULL,
					failure_hint(err->failure));
	else
		reply_error(call, failure_sqlerrcode(err->failure),
					psprintf("%s of run \"%s\" failed on backend \"%s\": %s", what ? what : call->def->noun,
							 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "?",
							 err->reason),
					err->message, failure_hint(err->failure));
}

/*
 * Send what can be sent now; the rest waits for the caller to read.  The
 * final message carries the call's times, the WAL flush its result waited
 * for (flush_ns, this turn's) counted as a worker transaction's.
 */
static void
flush_outbox(WorkerCall *call, uint64 flush_ns)
{
	while (call->outbox != NIL && !call->caller_gone)
	{
		OutMessage *msg = (OutMessage *) linitial(call->outbox);
		shm_mq_iovec parts[2] = {{msg->head->data, msg->head->len}, {msg->blob, msg->blob_len}};
		shm_mq_result res;

		if (msg->final && call->times.replied_at_ns == 0)
		{
			call->times.worker_txn_ns += flush_ns;
			call->times.replied_at_ns = mesh_clock_ns();
			call->times.backend = mesh_stat_backend(call->be.driver ? call->be.name : NULL);
			mesh_stat_worker_activity(worker_index, true);	/* counted before its caller can look */
			mesh_msg_set_times(msg->head, &call->times);
		}
		/* after WOULD_BLOCK, the same parts again: the queue remembers how far it got */
		res = shm_mq_sendv(call->mqh, parts, msg->blob_len > 0 ? 2 : 1, true, true);

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
 * WAL this turn of the loop must make durable before any request or message
 * goes out: every commit the turn deferred that must be on disk first (the
 * moves that come before a backend call, the results its callers are about
 * to hear of), so one flush covers every call of the turn.  written_wanted:
 * commits that need only be written before the requests leave (an ordinary
 * exec's row: the flush of its result takes it to disk).
 */
static XLogRecPtr durable_wanted = InvalidXLogRecPtr;
static XLogRecPtr written_wanted = InvalidXLogRecPtr;

/*
 * What the call committed up to lsn must be on disk before the loop sends
 * the requests the turn started and the messages it queued.
 */
void
worker_want_durable(XLogRecPtr lsn)
{
	if (lsn > durable_wanted)
		durable_wanted = lsn;
}

/*
 * What the call committed up to lsn must be written (not yet flushed)
 * before the loop sends the requests the turn started.
 */
void
worker_want_written(XLogRecPtr lsn)
{
	if (lsn > written_wanted)
		written_wanted = lsn;
}

/*
 * Make this turn's commits durable, or written where that is all they need:
 * one flush and one write at most, whatever the number of calls.  Runs
 * before the turn's requests are put on the wire (they only leave in
 * mesh_http_drive), so a command never runs without its exec row in the
 * WAL files, whatever process crashes.  Returns the time taken, in ns.
 */
static uint64
make_turn_durable(void)
{
	uint64		ns = 0;

	if (written_wanted > durable_wanted)
		ns += mesh_write_to(written_wanted);
	ns += mesh_flush_to(durable_wanted);
	durable_wanted = InvalidXLogRecPtr;
	written_wanted = InvalidXLogRecPtr;
	return ns;
}

/* Send what the calls queued (the turn made durable) and free the calls that ended. */
static void
send_all(uint64 flush_ns)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &calls)
	{
		WorkerCall *call = dlist_container(WorkerCall, node, iter.cur);

		flush_outbox(call, flush_ns);
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
		settle_txn_time(call);
		if (call->step == STEP_START)
			runnable = true;
		MemoryContextSwitchTo(old);
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

void
mesh_worker_main(Datum arg)
{
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
		flush_ns = make_turn_durable();
		if (exec_ended_this_turn)
		{
			/* mesh_exec_wait's callers look again, now that the ends are on disk */
			exec_ended_this_turn = false;
			ConditionVariableBroadcast(&mesh_shared->exec_ended);
		}
		completed = mesh_http_drive();
		send_all(flush_ns);
		mesh_stat_worker_turn(worker_index, ncalls);
		/* finished requests mean another pass */
		if (completed > 0 || runnable || any_call_ready() || queued_calls_fit())
			continue;

		timeout = mesh_http_timeout();
		calls_wait = calls_timeout();
		if (calls_wait >= 0 && (timeout < 0 || calls_wait < timeout))
			timeout = calls_wait;
		(void) WaitEventSetWait(set, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		mesh_stat_worker_woke(worker_index);
		ResetLatch(MyLatch);
	}
}
