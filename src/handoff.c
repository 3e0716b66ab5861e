/*-------------------------------------------------------------------------
 *
 * handoff.c
 *	  Shared memory for the worker pool, and the caller's side of a call.
 *
 * A call is one dynamic shared memory segment laid out with shm_toc: a
 * header, the typed request (calls.h), an optional binary blob (stdin, file
 * content), and a shm_mq on which the worker sends notices and the final
 * reply.  Nothing of a call lives outside PostgreSQL's memory contexts and
 * resource owners, so an error at any point leaks nothing.  The caller waits on
 * its latch, so Ctrl-C and statement_timeout interrupt it; when it stops
 * waiting for any reason its detach callback raises the call's cancelled
 * flag and wakes the worker, which then kills the command in the sandbox.
 *
 * All calls for one run go to the same worker (a hash of run_id), so a
 * worker can serialise materialisation of a run in process-local state
 * while runs spread across the pool.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "libpq/libpq.h"
#include "miscadmin.h"
#include "common/hashfn.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/shm_toc.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "version.h"
#include "settings.h"

#define MESH_SUBMIT_WAIT_MS 10000
#define MESH_DAEMON_START_WAIT_MS 10000

MeshShared *mesh_shared = NULL;

/* The call this backend is waiting on; mesh_call is not re-entrant. */
static int	waiting_worker = -1;
static bool waiting_done = false;

static Size
mesh_shmem_size(void)
{
	return MAXALIGN(sizeof(MeshShared));
}

/*
 * Call segments are created and attached for every call.  Carved from the
 * main shared memory region (PostgreSQL's min_dynamic_shared_memory) that
 * costs no system call on either side; a new shm_open/mmap segment per call
 * measured ~0.1 ms more per call on the bench machine, a quarter of a
 * declaration.  So, unless the server's configuration sets it, the region
 * gets room for about a hundred calls in flight, as a default of lower
 * priority than any configured value; a call that finds no room there (a
 * large stdin or file) gets a segment of its own, as before.  Called from
 * _PG_init, before the postmaster sizes shared memory.
 */
void
mesh_reserve_call_space(void)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), "%dMB", MESH_CALL_SPACE_MB);
	SetConfigOption("min_dynamic_shared_memory", buf, PGC_POSTMASTER, PGC_S_DYNAMIC_DEFAULT);
}

/* Called from the shmem_request_hook. */
void
mesh_shmem_request(void)
{
	RequestAddinShmemSpace(mesh_shmem_size());
}

/* Called from the shmem_startup_hook: set up the worker slots once. */
void
mesh_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	mesh_shared = ShmemInitStruct("mesh_exec", mesh_shmem_size(), &found);
	if (!found)
	{
		memset(mesh_shared, 0, sizeof(MeshShared));
		mesh_shared->nworkers = mesh_worker_count;
		pg_atomic_init_u64(&mesh_shared->next_exec_key, 1);
		mesh_shared->broker_procno = -1;
		/* a call right after the server (re)starts waits for the daemon the launcher starts */
		pg_atomic_init_u32(&mesh_shared->daemon_state,
						   mesh_embedded_sandboxd ? MESH_DAEMON_STARTING : MESH_DAEMON_ABSENT);
		ConditionVariableInit(&mesh_shared->daemon_ready);
		ConditionVariableInit(&mesh_shared->exec_ended);
		pg_atomic_init_u32(&mesh_shared->reclaim_wanted, 0);
		for (int i = 0; i <= MESH_MAX_WORKERS; i++)
		{
			SpinLockInit(&mesh_shared->workers[i].mutex);
			ConditionVariableInit(&mesh_shared->workers[i].queue_changed);
			pg_atomic_init_u32(&mesh_shared->workers[i].open_calls, 0);
		}
		mesh_stages_init();
		mesh_stats_init();
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The worker that owns a run: stable for the life of the server. */
int
mesh_worker_for_run(const char *run_id)
{
	return (int) (hash_bytes((const unsigned char *) run_id, strlen(run_id)) %
				  (uint32) mesh_shared->nworkers);
}

static Latch *
worker_latch(int index)
{
	return &ProcGlobal->allProcs[mesh_shared->workers[index].procno].procLatch;
}

/*
 * Runs whenever the caller's mapping of the call segment goes away: normal
 * completion, an error (cancel, statement_timeout), or backend exit.  Unless
 * the reply already arrived, tell the worker nobody is waiting any more.
 */
static void
call_detached(dsm_segment *seg, Datum arg)
{
	MeshCall   *call = (MeshCall *) DatumGetPointer(arg);
	int			w = waiting_worker;

	waiting_worker = -1;
	if (waiting_done || w < 0)
		return;
	pg_atomic_write_u32(&call->cancelled, 1);
	if (mesh_shared->workers[w].pid != 0)
		SetLatch(worker_latch(w));
}

/* Why a call could not be queued for a worker. */
typedef enum PushResult
{
	PUSHED,
	NOT_RUNNING,
	QUEUE_FULL,
	RESTARTED
} PushResult;

/*
 * Queue a call segment for a worker.  Its queue's sender was named first
 * (name_sender), and only that process may take it: when the slot's
 * worker exited or restarted since, the call is not queued (RESTARTED).
 */
static PushResult
push_call(int w, dsm_handle handle, uint64 sender_generation, uint64 *generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	PushResult	result = PUSHED;

	SpinLockAcquire(&slot->mutex);
	if (slot->pid == 0 || slot->generation != sender_generation)
		result = RESTARTED;
	else if (slot->tail - slot->head >= MESH_QUEUE_LEN)
		result = QUEUE_FULL;
	else
	{
		slot->queue[slot->tail % MESH_QUEUE_LEN] = handle;
		slot->tail++;
		*generation = slot->generation;
	}
	SpinLockRelease(&slot->mutex);
	return result;
}

/*
 * Name the process serving slot w as the reply queue's sender, once it
 * runs (false while it does not).  The caller names it, not the worker:
 * shm_mq_set_sender wakes the receiver, and a worker naming itself on
 * taking the call would wake its caller for nothing once per call.
 */
static bool
name_sender(int w, shm_mq *mq, uint64 *sender_generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	int			procno = -1;

	SpinLockAcquire(&slot->mutex);
	if (slot->pid != 0)
	{
		procno = slot->procno;
		*sender_generation = slot->generation;
	}
	SpinLockRelease(&slot->mutex);
	if (procno < 0)
		return false;
	shm_mq_set_sender(mq, &ProcGlobal->allProcs[procno]);
	return true;
}

static bool
worker_still_serving(int w, uint64 generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	bool		alive;

	SpinLockAcquire(&slot->mutex);
	alive = slot->pid != 0 && slot->generation == generation;
	SpinLockRelease(&slot->mutex);
	return alive;
}

/*
 * Queue the call for worker w.  A worker that is (re)starting, or whose
 * queue is full (it runs mesh.worker_max_calls calls already and as many
 * more wait), is waited for, cancellably, for up to MESH_SUBMIT_WAIT_MS,
 * asleep until the worker takes calls or starts; then the caller gets one
 * clear error that says which it was and what to raise.
 */
static void
submit_call(int w, dsm_segment *seg, shm_mq *mq, uint64 *generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MESH_SUBMIT_WAIT_MS);
	PushResult	result = NOT_RUNNING;
	bool		named = false;
	uint64		sender_generation = 0;

	ConditionVariablePrepareToSleep(&slot->queue_changed);
	for (;;)
	{
		long		left;

		if (!named)
			named = name_sender(w, mq, &sender_generation);
		if (named && (result = push_call(w, dsm_segment_handle(seg), sender_generation,
										 generation)) != QUEUE_FULL)
			break;
		/* not running yet (NOT_RUNNING), or its queue is full: wait */
		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (left <= 0)
			break;
		(void) ConditionVariableTimedSleep(&slot->queue_changed, left, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	if (result == RESTARTED)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("mesh worker %d restarted while this call was being queued", w),
				 errhint("Nothing was run; call again.  The server log says why the worker restarted.")));
	if (result == NOT_RUNNING)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("mesh worker %d is not running", w),
				 errhint("Check that mesh_exec is in shared_preload_libraries, that mesh.database names this database, and the server log for worker errors.")));
	if (result == QUEUE_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("mesh worker %d is saturated: it runs mesh.worker_max_calls (%d) calls and %d more are waiting",
						w, mesh_worker_max_calls, MESH_QUEUE_LEN),
				 errhint("Raise mesh.workers to spread runs over more workers, or mesh.worker_max_calls if the backend can take more concurrent calls; or retry later.")));
	SetLatch(worker_latch(w));
}

/*
 * A harness that dropped its connection must not leave a command running
 * for nobody: the backend would only notice when it next writes.  Exiting
 * detaches the call segment, which cancels the command in the sandbox.
 */
static void
check_client_still_there(void)
{
	if (MyProcPort != NULL && !pq_check_connection())
		ereport(FATAL,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("connection to client lost while waiting for a mesh call")));
}

/* The supervisor of the embedded daemon publishes what it sees, waking waiting calls. */
void
mesh_set_daemon_state(MeshDaemonState state)
{
	pg_atomic_write_u32(&mesh_shared->daemon_state, state);
	ConditionVariableBroadcast(&mesh_shared->daemon_ready);
}

/*
 * A call that arrives while the launcher is (re)starting the embedded daemon
 * (right after a server start, or after the daemon died) waits for it --
 * cancellably, until DEADLINE or MESH_DAEMON_START_WAIT_MS at most -- rather
 * than failing with "cannot be reached" a moment too early.  Whichever
 * backend the run uses: the wait is short and only while a start is due.
 */
void
mesh_wait_for_embedded_daemon(TimestampTz deadline)
{
	TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MESH_DAEMON_START_WAIT_MS);

	if (deadline != 0 && deadline < limit)
		limit = deadline;
	if (pg_atomic_read_u32(&mesh_shared->daemon_state) != MESH_DAEMON_STARTING)
		return;
	ConditionVariablePrepareToSleep(&mesh_shared->daemon_ready);
	while (pg_atomic_read_u32(&mesh_shared->daemon_state) == MESH_DAEMON_STARTING)
	{
		long		left = (long) ((limit - GetCurrentTimestamp()) / 1000);

		if (left <= 0 ||
			ConditionVariableTimedSleep(&mesh_shared->daemon_ready, left, PG_WAIT_EXTENSION))
			break;
	}
	ConditionVariableCancelSleep();
}

/* Raise the error a worker reported, with its SQLSTATE, detail and hint. */
static void
raise_reported_error(const MeshMsg *msg)
{
	const MeshErrorReply *e = mesh_msg_fixed(msg, sizeof(MeshErrorReply));
	const char *message = mesh_msg_string(msg, e->message);
	const char *detail = mesh_msg_string(msg, e->detail);
	const char *hint = mesh_msg_string(msg, e->hint);

	ereport(ERROR,
			(errcode(e->sqlerrcode ? e->sqlerrcode : ERRCODE_INTERNAL_ERROR),
			 errmsg_internal("%s", message ? message : "mesh worker reported an error"),
			 detail ? errdetail_internal("%s", detail) : 0,
			 hint ? errhint("%s", hint) : 0));
}

/*
 * The final message points into what shm_mq_receive returned: a message
 * larger than the ring was assembled in the queue handle's private buffer,
 * which outlives the segment, so it is used in place (a file's bytes are
 * held twice, not three times); one that fitted in the ring lies in the
 * segment itself and is copied before the segment goes.
 */
static void
keep_message(dsm_segment *seg, MeshMsg *msg)
{
	char	   *start = dsm_segment_address(seg);
	char	   *copy;

	if (msg->base < start || msg->base >= start + dsm_segment_map_length(seg))
		return;
	copy = palloc(msg->len);
	memcpy(copy, msg->base, msg->len);
	mesh_msg_parse(copy, msg->len, msg);
}

/*
 * Replies that carry output or a file get a roomy queue; the rest are a few
 * hundred bytes.  (A bigger reply still passes a small queue, in turns.)
 */
static Size
reply_queue_size(MeshOp op)
{
	return (op == MESH_OP_EXEC || op == MESH_OP_READ_FILE || op == MESH_OP_SWEEP)
		? MESH_REPLY_QUEUE_SIZE : MESH_SMALL_REPLY_QUEUE_SIZE;
}

/*
 * Build the call segment with shm_toc: the header, the request message,
 * the blob (when there is one), the reply queue.
 */
static dsm_segment *
create_call_segment(const char *run_id, StringInfo request, const char *blob, Size blob_len)
{
	MeshOp		op = (MeshOp) ((MeshMsgHeader *) request->data)->op;
	shm_toc_estimator e;
	dsm_segment *seg;
	shm_toc    *toc;
	MeshCall   *call;
	char	   *copy;

	Assert(strlen(run_id) <= MESH_MAX_ID_BYTES);
	shm_toc_initialize_estimator(&e);
	shm_toc_estimate_chunk(&e, sizeof(MeshCall));
	shm_toc_estimate_chunk(&e, request->len);
	if (blob_len > 0)
		shm_toc_estimate_chunk(&e, blob_len);
	shm_toc_estimate_chunk(&e, reply_queue_size(op));
	shm_toc_estimate_keys(&e, 4);
	seg = dsm_create(shm_toc_estimate(&e), 0);
	toc = shm_toc_create(MESH_CALL_MAGIC, dsm_segment_address(seg), shm_toc_estimate(&e));

	call = shm_toc_allocate(toc, sizeof(MeshCall));
	memset(call, 0, sizeof(MeshCall));
	call->op = op;
	call->database = MyDatabaseId;
	call->user = GetUserId();
	pg_atomic_init_u32(&call->cancelled, 0);
	call->request_len = request->len;
	call->blob_len = blob_len;
	strlcpy(call->run_id, run_id, sizeof(call->run_id));
	shm_toc_insert(toc, MESH_KEY_CALL, call);

	copy = shm_toc_allocate(toc, request->len);
	memcpy(copy, request->data, request->len);
	shm_toc_insert(toc, MESH_KEY_REQUEST, copy);
	if (blob_len > 0)
	{
		copy = shm_toc_allocate(toc, blob_len);
		memcpy(copy, blob, blob_len);
		shm_toc_insert(toc, MESH_KEY_BLOB, copy);
	}
	shm_toc_insert(toc, MESH_KEY_QUEUE,
				   shm_mq_create(shm_toc_allocate(toc, reply_queue_size(op)), reply_queue_size(op)));
	return seg;
}

/* Hand a request to the worker that owns run_id and wait for its reply. */
void
mesh_call(const char *run_id, StringInfo request,
		  const char *blob, Size blob_len, MeshMsg *reply)
{
	mesh_call_until(run_id, request, blob, blob_len, 0, reply);
}

/* mesh_call, waiting at most until deadline (0: as long as it takes). */
void
mesh_call_until(const char *run_id, StringInfo request,
				const char *blob, Size blob_len, TimestampTz deadline, MeshMsg *reply)
{
	if (((MeshMsgHeader *) request->data)->op != MESH_OP_ACQUIRE)	/* declaring a run calls no backend */
		mesh_wait_for_embedded_daemon(deadline);
	mesh_call_slot(mesh_worker_for_run(run_id), run_id, request, blob, blob_len, deadline, reply);
}

/*
 * Wait for the final message of a call, re-raising notices sent on the way
 * to the caller's client.  With a deadline (not 0), waiting past it is an
 * error (the reaper bounds its sweeps so).
 */
static void
receive_final(int w, uint64 generation, shm_mq_handle *mqh, TimestampTz deadline, MeshMsg *msg)
{
	for (;;)
	{
		Size		nbytes;
		void	   *data;
		shm_mq_result res = shm_mq_receive(mqh, &nbytes, &data, true);

		if (res == SHM_MQ_SUCCESS)
		{
			mesh_msg_parse(data, nbytes, msg);
			if (msg->hdr->kind != MESH_MSG_NOTICE)
				return;
			ereport(NOTICE,
					(errmsg_internal("%s",
									 mesh_msg_string(msg, ((const MeshNoticeReply *)
														   mesh_msg_fixed(msg, sizeof(MeshNoticeReply)))->message))));
			continue;
		}
		if (res == SHM_MQ_DETACHED || !worker_still_serving(w, generation))
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("mesh worker %d exited while handling this request", w),
					 errhint("What ran is recorded in mesh.execs; the server log says why the worker exited.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 deadline ? 100L : 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		check_client_still_there();
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("gave up waiting for mesh worker %d: the sweep's time is up", w)));
	}
}

/*
 * Hand a request to the process serving slot w and wait for its reply,
 * which is left in *reply (a MESH_MSG_REPLY for the request's operation).
 * An error reply is raised as an ERROR with the sender's SQLSTATE.
 * Everything here is palloc'd or resource-owned (the segment): an error
 * anywhere, here or in the caller after, leaks nothing.
 */
void
mesh_call_slot(int w, const char *run_id, StringInfo request,
			   const char *blob, Size blob_len, TimestampTz deadline, MeshMsg *reply)
{
	uint64		started = mesh_clock_ns();
	MeshOp		op = (MeshOp) ((MeshMsgHeader *) request->data)->op;
	dsm_segment *seg;
	shm_toc    *toc;
	MeshCall   *call;
	shm_mq	   *mq;
	shm_mq_handle *mqh;
	uint64		generation = 0;

	mesh_require_sql_version();
	seg = create_call_segment(run_id, request, blob, blob_len);
	toc = shm_toc_attach(MESH_CALL_MAGIC, dsm_segment_address(seg));
	call = shm_toc_lookup(toc, MESH_KEY_CALL, false);
	mq = shm_toc_lookup(toc, MESH_KEY_QUEUE, false);
	shm_mq_set_receiver(mq, MyProc);
	/*
	 * No detach callback for the queue: detaching it would wake the worker
	 * after every reply.  A caller that stops waiting tells the worker
	 * through call_detached instead.
	 */
	mqh = shm_mq_attach(mq, NULL, NULL);

	waiting_worker = w;
	waiting_done = false;
	on_dsm_detach(seg, call_detached, PointerGetDatum(call));

	call->queued_at_ns = mesh_clock_ns();
	PG_TRY();
	{
		submit_call(w, seg, mq, &generation);
		receive_final(w, generation, mqh, deadline, reply);
	}
	PG_CATCH();
	{
		/* no answer (cancelled, timed out, no worker): a failed call, of no backend */
		mesh_stat_count(op, MESH_STAT_NO_BACKEND, true, mesh_clock_ns() - started);
		PG_RE_THROW();
	}
	PG_END_TRY();

	waiting_done = true;
	keep_message(seg, reply);
	dsm_detach(seg);
	mesh_stat_count(op, reply->hdr->times.backend, reply->hdr->kind == MESH_MSG_ERROR,
					mesh_stages_count(op, &reply->hdr->times, started));
	if (reply->hdr->kind == MESH_MSG_ERROR)
		raise_reported_error(reply);
	if (reply->hdr->kind != MESH_MSG_REPLY || reply->hdr->op != op)
		elog(ERROR, "mesh: worker %d answered with a message of kind %d for operation %d",
			 w, reply->hdr->kind, reply->hdr->op);
}

/* A worker (re)starting: publish its pid and latch, drop any stale queue. */
void
mesh_worker_attach_slot(int index)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[index];

	SpinLockAcquire(&slot->mutex);
	slot->pid = MyProcPid;
	slot->procno = MyProc->pgprocno;
	slot->generation++;
	slot->head = slot->tail;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->queue_changed);
}

/* Wakes the worker (or reaper) of slot INDEX, if it runs, to look at what shared memory asks. */
void
mesh_worker_wake(int index)
{
	if (mesh_shared->workers[index].pid != 0)
		SetLatch(worker_latch(index));
}

void
mesh_worker_detach_slot(int index)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[index];

	SpinLockAcquire(&slot->mutex);
	slot->pid = 0;
	slot->generation++;
	SpinLockRelease(&slot->mutex);
	pg_atomic_write_u32(&slot->open_calls, 0);
}

/*
 * Attach a queued call segment, whose caller named this process its
 * queue's sender; NULL when the caller already gave up (the segment is
 * gone) or it is not a call.  *request and *blob
 * point into the segment, which stays mapped until the worker detaches.
 */
dsm_segment *
mesh_attach_call(dsm_handle handle, MeshCall **hdr, MeshMsg *request,
				 const char **blob, shm_mq_handle **mqh)
{
	dsm_segment *seg = dsm_attach(handle);
	shm_toc    *toc;
	shm_mq	   *mq;

	if (seg == NULL)
		return NULL;
	dsm_pin_mapping(seg);
	toc = shm_toc_attach(MESH_CALL_MAGIC, dsm_segment_address(seg));
	if (toc == NULL)
	{
		dsm_detach(seg);
		return NULL;
	}
	*hdr = shm_toc_lookup(toc, MESH_KEY_CALL, false);
	mesh_msg_parse(shm_toc_lookup(toc, MESH_KEY_REQUEST, false), (*hdr)->request_len, request);
	*blob = (*hdr)->blob_len > 0 ? shm_toc_lookup(toc, MESH_KEY_BLOB, false) : NULL;
	mq = shm_toc_lookup(toc, MESH_KEY_QUEUE, false);
	/* its caller named this process the sender (name_sender) */
	if (shm_mq_get_sender(mq) != MyProc)
	{
		dsm_detach(seg);
		return NULL;
	}
	*mqh = shm_mq_attach(mq, seg, NULL);
	return seg;
}

/* Are calls waiting in the worker's queue? */
bool
mesh_worker_has_queued(int index)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[index];
	bool		queued;

	SpinLockAcquire(&slot->mutex);
	queued = slot->head != slot->tail;
	SpinLockRelease(&slot->mutex);
	return queued;
}

/* Take the next queued call, if any; callers waiting for room are woken. */
bool
mesh_worker_pop(int index, dsm_handle *handle)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[index];
	bool		got = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->head != slot->tail)
	{
		*handle = slot->queue[slot->head % MESH_QUEUE_LEN];
		slot->head++;
		got = true;
	}
	SpinLockRelease(&slot->mutex);
	if (got)
	{
		ConditionVariableBroadcast(&slot->queue_changed);	/* room for a waiting caller */
		mesh_stat_worker_activity(index, false);
	}
	return got;
}
