/*-------------------------------------------------------------------------
 *
 * handoff.c
 *	  Shared memory for the worker pool, and the caller's side of a call.
 *
 * A call is one dynamic shared memory segment: a header, the request as
 * JSON, an optional binary blob (stdin, file content), and a shm_mq on
 * which the worker sends notices and the final reply.  The caller waits on
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

#include "mesh_json.h"

#include "libpq/libpq.h"
#include "miscadmin.h"
#include "common/hashfn.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/elog.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "mesh_exec.h"

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
		for (int i = 0; i <= MESH_MAX_WORKERS; i++)
		{
			SpinLockInit(&mesh_shared->workers[i].mutex);
			ConditionVariableInit(&mesh_shared->workers[i].queue_changed);
		}
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
	QUEUE_FULL
} PushResult;

/* Queue a call segment for a worker. */
static PushResult
push_call(int w, dsm_handle handle, uint64 *generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	PushResult	result = PUSHED;

	SpinLockAcquire(&slot->mutex);
	if (slot->pid == 0)
		result = NOT_RUNNING;
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
submit_call(int w, dsm_segment *seg, uint64 *generation)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[w];
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MESH_SUBMIT_WAIT_MS);
	PushResult	result;

	ConditionVariablePrepareToSleep(&slot->queue_changed);
	while ((result = push_call(w, dsm_segment_handle(seg), generation)) != PUSHED)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

		if (left <= 0)
			break;
		(void) ConditionVariableTimedSleep(&slot->queue_changed, left, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
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

/* A reply field copied out of the reply document, or NULL. */
static char *
reply_field(json_t *error, const char *name)
{
	const char *value = json_string_value(json_object_get(error, name));

	return value ? pstrdup(value) : NULL;
}

/*
 * Raise the error a worker reported, with its SQLSTATE, detail and hint.
 * The reply document is freed first: jansson's memory is not PostgreSQL's
 * and would outlive the error.
 */
static void
raise_reported_error(json_t *doc)
{
	json_t	   *error = json_object_get(doc, "error");
	char	   *sqlstate = reply_field(error, "sqlstate");
	char	   *message = reply_field(error, "message");
	char	   *detail = reply_field(error, "detail");
	char	   *hint = reply_field(error, "hint");
	int			code = ERRCODE_INTERNAL_ERROR;

	json_decref(doc);
	if (sqlstate && strlen(sqlstate) == 5)
		code = MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2], sqlstate[3], sqlstate[4]);
	ereport(ERROR,
			(errcode(code),
			 errmsg_internal("%s", message ? message : "mesh worker reported an error"),
			 detail ? errdetail_internal("%s", detail) : 0,
			 hint ? errhint("%s", hint) : 0));
}

/* Split a framed message into its JSON document and blob. */
static void
decode_message(const char *data, Size len, MeshReply *reply)
{
	uint32		json_len;

	if (len < sizeof(uint32))
		elog(ERROR, "mesh: short message from worker");
	memcpy(&json_len, data, sizeof(uint32));
	if (json_len > len - sizeof(uint32))
		elog(ERROR, "mesh: malformed message from worker");
	reply->doc = json_loadb(data + sizeof(uint32), json_len, 0, NULL);
	if (reply->doc == NULL)
		elog(ERROR, "mesh: worker sent a reply that is not JSON");
	/* not copied: see keep_reply_blob */
	reply->blob_len = len - sizeof(uint32) - json_len;
	reply->blob = (char *) data + sizeof(uint32) + json_len;
}

/*
 * A reply's blob (a file's bytes) points into what shm_mq_receive returned:
 * a large message was assembled in the queue handle's private buffer, which
 * outlives the segment, so it is used in place (the caller holds the bytes
 * twice, not three times); a message that fitted in the ring lies in the
 * segment itself and is copied before the segment goes.
 */
static void
keep_reply_blob(dsm_segment *seg, MeshReply *reply)
{
	char	   *start = dsm_segment_address(seg);
	char	   *copy;

	if (reply->blob < start || reply->blob >= start + dsm_segment_map_length(seg))
		return;
	copy = palloc(reply->blob_len + 1);
	memcpy(copy, reply->blob, reply->blob_len);
	reply->blob = copy;
}

/*
 * Frame a message: uint32 JSON length, then the JSON.  A raw blob, if any,
 * follows: the sender appends it as a second part of the same message
 * (shm_mq_sendv), so it is never copied into the frame.
 */
void
mesh_reply_encode(StringInfo out, json_t *doc)
{
	char	   *json = json_dumps(doc, JSON_COMPACT);
	uint32		json_len = (uint32) strlen(json);

	appendBinaryStringInfo(out, (char *) &json_len, sizeof(uint32));
	appendBinaryStringInfo(out, json, json_len);
	free(json);
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

/* Build the call segment: header, request JSON, blob, reply queue. */
static dsm_segment *
create_call_segment(MeshOp op, const char *json, const char *blob, Size blob_len)
{
	Size		json_len = strlen(json);
	Size		json_off = MAXALIGN(sizeof(MeshCall));
	Size		blob_off = json_off + json_len;
	Size		mq_off = MAXALIGN(blob_off + blob_len);
	dsm_segment *seg = dsm_create(mq_off + reply_queue_size(op), 0);
	char	   *base = dsm_segment_address(seg);
	MeshCall   *call = (MeshCall *) base;

	call->magic = MESH_CALL_MAGIC;
	call->op = op;
	call->database = MyDatabaseId;
	call->user = GetUserId();
	pg_atomic_init_u32(&call->cancelled, 0);
	call->json_off = json_off;
	call->json_len = json_len;
	call->blob_off = blob_off;
	call->blob_len = blob_len;
	call->mq_off = mq_off;
	memcpy(base + json_off, json, json_len);
	if (blob_len > 0)
		memcpy(base + blob_off, blob, blob_len);
	return seg;
}

/* Hand a request to the worker that owns run_id and wait for its reply. */
void
mesh_call(MeshOp op, const char *run_id, json_t *request,
		  const char *blob, Size blob_len, MeshReply *reply)
{
	mesh_call_until(op, run_id, request, blob, blob_len, 0, reply);
}

/* mesh_call, waiting at most until deadline (0: as long as it takes). */
void
mesh_call_until(MeshOp op, const char *run_id, json_t *request,
				const char *blob, Size blob_len, TimestampTz deadline, MeshReply *reply)
{
	if (op != MESH_OP_ACQUIRE)	/* declaring a run calls no backend */
		mesh_wait_for_embedded_daemon(deadline);
	mesh_call_slot(mesh_worker_for_run(run_id), op, request, blob, blob_len, deadline, reply);
}

/*
 * Hand a request to the process serving slot w and wait for its reply.
 * The request document is consumed (freed here), as json_pack's "o" does.
 * Notices sent on the way are re-raised here, to the caller's client.  An
 * error reply is raised as an ERROR with the sender's SQLSTATE.  With a
 * deadline (not 0), waiting past it is an error (the reaper bounds its
 * sweeps so).
 */
void
mesh_call_slot(int w, MeshOp op, json_t *request,
			   const char *blob, Size blob_len, TimestampTz deadline, MeshReply *reply)
{
	char	   *json = request ? json_dumps(request, JSON_COMPACT) : NULL;
	dsm_segment *seg;
	shm_mq	   *mq;
	shm_mq_handle *mqh;
	uint64		generation = 0;

	if (request)
		json_decref(request);	/* consumed: nothing of it outlives an error below */
	if (json == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("mesh_exec arguments must be valid UTF-8"),
				 errhint("Use a database with UTF8 encoding; pass binary data as bytea (stdin, file content).")));
	seg = create_call_segment(op, json, blob, blob_len);
	free(json);
	mq = shm_mq_create((char *) dsm_segment_address(seg) +
					   ((MeshCall *) dsm_segment_address(seg))->mq_off,
					   reply_queue_size(op));
	shm_mq_set_receiver(mq, MyProc);
	mqh = shm_mq_attach(mq, seg, NULL);

	waiting_worker = w;
	waiting_done = false;
	on_dsm_detach(seg, call_detached, PointerGetDatum(dsm_segment_address(seg)));

	submit_call(w, seg, &generation);

	for (;;)
	{
		Size		nbytes;
		void	   *data;
		shm_mq_result res = shm_mq_receive(mqh, &nbytes, &data, true);

		if (res == SHM_MQ_SUCCESS)
		{
			decode_message(data, nbytes, reply);
			if (json_object_get(reply->doc, "notice"))
			{
				ereport(NOTICE,
						(errmsg_internal("%s", json_string_value(json_object_get(reply->doc, "notice")))));
				json_decref(reply->doc);
				continue;
			}
			break;
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

	waiting_done = true;
	keep_reply_blob(seg, reply);
	dsm_detach(seg);
	if (json_object_get(reply->doc, "error"))
		raise_reported_error(reply->doc);
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

void
mesh_worker_detach_slot(int index)
{
	MeshWorkerSlot *slot = &mesh_shared->workers[index];

	SpinLockAcquire(&slot->mutex);
	slot->pid = 0;
	slot->generation++;
	SpinLockRelease(&slot->mutex);
}

/*
 * Attach a queued call segment as its sender; NULL when the caller already
 * gave up (the segment is gone) or it is not a call.
 */
dsm_segment *
mesh_attach_call(dsm_handle handle, MeshCall **hdr, shm_mq_handle **mqh)
{
	dsm_segment *seg = dsm_attach(handle);
	char	   *base;
	shm_mq	   *mq;

	if (seg == NULL)
		return NULL;
	dsm_pin_mapping(seg);
	base = dsm_segment_address(seg);
	*hdr = (MeshCall *) base;
	if ((*hdr)->magic != MESH_CALL_MAGIC)
	{
		dsm_detach(seg);
		return NULL;
	}
	mq = (shm_mq *) (base + (*hdr)->mq_off);
	shm_mq_set_sender(mq, MyProc);
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
		ConditionVariableBroadcast(&slot->queue_changed);	/* room for a waiting caller */
	return got;
}
