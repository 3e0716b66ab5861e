/*-------------------------------------------------------------------------
 *
 * worker_call.c
 *	  The calls a mesh worker has in progress: each one's record, taken
 *	  from its caller's segment or made by the worker for itself, the
 *	  bounds on how many there are (mesh.worker_max_calls, and the slots of
 *	  background commands), and the start of each driver run, whose end
 *	  goes to the function the operation names (on_end).
 *
 * The layer the loop (worker.c) and every operation file stand on: it
 * calls none of them, and names no operation but by its message format.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "storage/fd.h"
#include "utils/memutils.h"

#include "handoff.h"
#include "txn.h"
#include "worker_call.h"

dlist_head	worker_calls = DLIST_STATIC_INIT(worker_calls);
int			worker_ncalls = 0;	/* of worker_calls, those counted (not followers) */
int			worker_index;
char	   *worker_install_id;
static MemoryContext worker_cxt;

static void leave_background_slot(WorkerCall *call);

/* Background commands this worker starts or follows (their calls hold a slot). */
static int	background_live = 0;

/* The process's calls live under one context; the worker's identity for its backends. */
void
worker_calls_init(int index)
{
	worker_index = index;
	worker_cxt = AllocSetContextCreate(TopMemoryContext, "mesh worker", ALLOCSET_DEFAULT_SIZES);
	worker_install_id = MemoryContextStrdup(worker_cxt,
											psprintf(UINT64_FORMAT, GetSystemIdentifier()));
}

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
	call->run_id = own ? MemoryContextStrdup(call->cxt, run_id) : run_id;
	if (own)
		msg = memcpy(MemoryContextAlloc(call->cxt, msg_len), msg, msg_len);
	mesh_msg_parse(msg, msg_len, &call->msg);
	memcpy(&call->req, mesh_msg_fixed(&call->msg, request_size(op)), request_size(op));
	call->txn_mark = mesh_txn_time_ns;
	call->step = STEP_START;
	return call;
}

/* Attach a queued call segment; NULL when its caller already gave up. */
WorkerCall *
worker_call_attach(dsm_handle handle)
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

/* A call joins those in progress, counted against mesh.worker_max_calls. */
void
worker_call_add(WorkerCall *call)
{
	dlist_push_tail(&worker_calls, &call->node);
	worker_ncalls++;
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

/* The call ended and its replies are sent (or its caller left): it goes. */
void
worker_call_free(WorkerCall *call)
{
	/* a read's reply was sent from the last response's body: it goes now */
	mesh_run_end(&call->run);
	if (call->be.config)
		json_decref(call->be.config);
	if (call->env)
		json_decref(call->env);
	dlist_delete(&call->node);
	if (!call->uncounted)
		worker_ncalls--;
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
	dlist_push_tail(&worker_calls, &call->node);
	if (counted)
		worker_ncalls++;
	return call;
}

/*
 * A background command's caller has its exec id: the call lets go of the
 * caller's segment and follows the command alone, uncounted.  It keeps
 * what it still needs (the run's id) in its own memory and forgets what
 * pointed into the segment.
 */
void
worker_call_detach_caller(WorkerCall *call)
{
	call->run_id = MemoryContextStrdup(call->cxt, call->run_id);
	call->spec.argv = NULL;
	call->spec.dir = NULL;
	call->spec.stdin_data = NULL;
	call->blob = NULL;
	memset(&call->msg, 0, sizeof(call->msg));
	call->caller_gone = true;
	release_caller(call);
	if (!call->uncounted)
		worker_ncalls--;
	call->uncounted = true;
}

/*
 * Is another call of this run changing its workspace's state right now
 * (materializing or releasing it)?  Such changes are exclusive: the run's
 * other calls wait, parked, and start over when it ends.
 */
bool
run_is_changing(const char *run_id, WorkerCall *except)
{
	dlist_iter	iter;

	dlist_foreach(iter, &worker_calls)
	{
		WorkerCall *other = dlist_container(WorkerCall, node, iter.cur);

		if (other == except || strcmp(other->run_id, run_id) != 0)
			continue;
		if (other->step == STEP_ACQUIRING ||
			(other->def && other->def->exclusive && other->step == STEP_OPERATING))
			return true;
	}
	return false;
}

/*--------------------------------------------------------------------------
 * Background commands' slots
 *--------------------------------------------------------------------------
 */

/* How many background commands this worker starts or follows now. */
int
worker_background_slots_used(void)
{
	return background_live;
}

/* The call holds one of the worker's background slots, and its socket is counted. */
void
take_background_slot(WorkerCall *call)
{
	if (call->background_slot)
		return;
	call->background_slot = true;
	background_live++;
	/* fd.c keeps its own files fewer by as many */
	ReserveExternalFD();
}

/* The call ends: its slot is free again. */
static void
leave_background_slot(WorkerCall *call)
{
	if (!call->background_slot)
		return;
	call->background_slot = false;
	background_live--;
	ReleaseExternalFD();
}

/*--------------------------------------------------------------------------
 * A call's driver run
 *--------------------------------------------------------------------------
 */

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
 * goes to out; ON_END takes it from there, called by the loop.
 */
void
start_op(WorkerCall *call, CallStep step, bool built, const MeshHttpRequest *req,
		 MeshResponseParser parse, void *out, size_t max_response,
		 void (*on_end) (WorkerCall *call))
{
	call->http_started = mesh_clock_ns();
	call->on_end = on_end;
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

/* Replies of a few hundred bytes: a write's, a release's, a kill's. */
size_t
worker_small_response_limit(WorkerCall *call)
{
	return 64 * 1024;
}

