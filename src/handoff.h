/*-------------------------------------------------------------------------
 *
 * handoff.h
 *	  Caller <-> worker hand-off in shared memory.
 *
 * A caller (a backend running mesh_exec() and friends) puts its typed
 * request (calls.h) in a dynamic shared memory segment laid out with
 * shm_toc, pushes the segment's handle onto the queue of the worker that
 * owns the run, and waits on a shm_mq in the same segment for messages:
 * zero or more notices, then one final reply or error.
 *
 * No queue table: a worker could not see a caller's uncommitted rows, and a
 * caller that held a row the worker needs would deadlock invisibly.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_HANDOFF_H
#define MESH_HANDOFF_H

#include "postgres.h"

#include "calls.h"

#include "lib/stringinfo.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/dsm.h"
#include "storage/shm_mq.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "settings.h"

#define MESH_QUEUE_LEN 256
#define MESH_CALL_MAGIC 0x6d657368
#define MESH_REPLY_QUEUE_SIZE (64 * 1024)
#define MESH_SMALL_REPLY_QUEUE_SIZE (8 * 1024)
#define MESH_CALL_SPACE_MB 8		/* main shared memory kept for call segments */

/* The reaper's queue sits after the workers' in the slot array. */
#define MESH_REAPER_SLOT MESH_MAX_WORKERS

/* Per-worker state in the main shared memory segment. */
typedef struct MeshWorkerSlot
{
	slock_t		mutex;			/* protects the queue and pid */
	ConditionVariable queue_changed;	/* the worker took calls, or (re)started */
	pid_t		pid;			/* 0 while not running */
	int			procno;			/* the worker's PGPROC number, for its latch */
	uint64		generation;		/* bumped on each (re)start */
	uint32		head;			/* next handle to take */
	uint32		tail;			/* next free position */
	pg_atomic_uint32 open_calls;	/* callers' calls in progress, not yet answered (group commit) */
	dsm_handle	queue[MESH_QUEUE_LEN];
} MeshWorkerSlot;

/* The embedded mesh-sandboxd as its supervisor (src/launcher.c) last saw it. */
typedef enum MeshDaemonState
{
	MESH_DAEMON_ABSENT = 0,		/* not embedded, not installed, or the server is stopping */
	MESH_DAEMON_STARTING,		/* being (re)started: calls wait for it, boundedly */
	MESH_DAEMON_READY			/* serving requests */
} MeshDaemonState;

/* Per-stage timing of the calls answered (stages.c): mesh.call_stages(). */
typedef enum MeshStage
{
	MESH_STAGE_HANDOFF,			/* caller queued the call -> a worker took it */
	MESH_STAGE_WORKER_TXN,		/* in the worker's transactions and WAL flushes */
	MESH_STAGE_HTTP,			/* backend requests: sent -> response received */
	MESH_STAGE_REPLY,			/* worker queued the reply -> caller has it */
	MESH_STAGE_TOTAL,			/* the caller's whole wait, from entering mesh_call */
	MESH_STAGE_COUNT
} MeshStage;

typedef struct MeshStageCounters
{
	pg_atomic_uint64 calls;
	pg_atomic_uint64 ns[MESH_STAGE_COUNT];
} MeshStageCounters;

/*
 * Calls per backend and operation (stats.c): mesh.stat_backends.  A call's
 * latency goes to a log-bucket histogram, four buckets per doubling from
 * 1024 ns, whose percentiles the view interpolates.  Atomics only, as the
 * stages': no lock on the call path.
 */
#define MESH_STAT_BUCKETS 128
#define MESH_STAT_BACKENDS 16	/* backend names counted apart */
#define MESH_STAT_NO_BACKEND 0	/* calls that reached no backend */
#define MESH_STAT_OTHER (MESH_STAT_BACKENDS + 1)	/* names past the first 16 */
#define MESH_STAT_SLOTS (MESH_STAT_BACKENDS + 2)

typedef struct MeshOpStats
{
	pg_atomic_uint32 seen;		/* counted since the server started: a row (never reset) */
	pg_atomic_uint64 calls;
	pg_atomic_uint64 errors;	/* calls that raised an error */
	pg_atomic_uint64 total_ns;
	pg_atomic_uint64 buckets[MESH_STAT_BUCKETS];
} MeshOpStats;

typedef struct MeshBackendStats
{
	pg_atomic_uint32 named;		/* name is set: written once, under stat_lock */
	char		name[NAMEDATALEN];	/* mesh.backends names are at most 63 bytes */
	MeshOpStats ops[MESH_OP_COUNT];	/* by MeshOp */
} MeshBackendStats;

/* A worker's own counters (stats.c): mesh.stat_workers. */
typedef struct MeshWorkerStats
{
	pg_atomic_uint64 calls;		/* calls it ended */
	pg_atomic_uint64 wal_flushes;	/* WAL flushes its turns waited for */
	pg_atomic_uint64 busy_ns;	/* time in its loop, not asleep waiting for events */
	pg_atomic_uint64 busy_mark; /* mesh_clock_ns() its busy time was last counted to */
	pg_atomic_uint32 in_flight; /* calls in progress, as of its last turn */
	pg_atomic_uint64 last_activity; /* TimestampTz it last took or ended a call; 0: never */
} MeshWorkerStats;

typedef struct MeshShared
{
	int			nworkers;
	pg_atomic_uint64 next_exec_key;
	int			broker_procno;	/* the broker's PGPROC number, -1 when not running */
	pg_atomic_uint32 daemon_state;	/* MeshDaemonState */
	ConditionVariable daemon_ready; /* broadcast when daemon_state changes */
	ConditionVariable exec_ended;	/* broadcast when background commands' ends are recorded */
	pg_atomic_uint32 reclaim_wanted;	/* a snapshot was retired or freed: the reaper reclaims */
	MeshWorkerSlot workers[MESH_MAX_WORKERS + 1];	/* workers, then the reaper */
	MeshStageCounters stages[MESH_OP_COUNT];	/* by MeshOp */
	slock_t		stat_lock;		/* taken to name a row of stat_backends */
	pg_atomic_uint64 stats_reset;	/* TimestampTz the counters below start from */
	MeshBackendStats stat_backends[MESH_STAT_SLOTS];
	MeshWorkerStats stat_workers[MESH_MAX_WORKERS + 1];
} MeshShared;

/* The call segment's shm_toc keys. */
#define MESH_KEY_CALL 1			/* MeshCall */
#define MESH_KEY_REQUEST 2		/* the request message (calls.h) */
#define MESH_KEY_BLOB 3			/* stdin or a file's content, when there is one */
#define MESH_KEY_QUEUE 4		/* shm_mq: worker -> caller */

/* The call segment's header, found under MESH_KEY_CALL. */
typedef struct MeshCall
{
	MeshOp		op;
	Oid			database;
	Oid			user;
	pg_atomic_uint32 cancelled; /* set by the caller when it stops waiting */
	uint64		queued_at_ns;	/* mesh_clock_ns() when the caller queued it */
	Size		request_len;
	Size		blob_len;
	char		run_id[MESH_MAX_ID_BYTES + 1];	/* "" for the reaper */
} MeshCall;

extern MeshShared *mesh_shared;

extern void mesh_reserve_call_space(void);
extern void mesh_shmem_request(void);
extern void mesh_shmem_startup(void);
extern int	mesh_worker_for_run(const char *run_id);

/* caller side: REQUEST was built with mesh_msg_begin(MESH_MSG_REQUEST, op) */
extern void mesh_call(const char *run_id, StringInfo request,
					  const char *blob, Size blob_len, MeshMsg *reply);
extern void mesh_call_until(const char *run_id, StringInfo request,
							const char *blob, Size blob_len, TimestampTz deadline,
							MeshMsg *reply);
extern void mesh_call_slot(int slot, const char *run_id, StringInfo request,
						   const char *blob, Size blob_len, TimestampTz deadline,
						   MeshMsg *reply);
extern void mesh_wait_for_embedded_daemon(TimestampTz deadline);
extern void mesh_set_daemon_state(MeshDaemonState state);

/* worker side */
extern void mesh_worker_attach_slot(int index);
extern bool mesh_worker_pop(int index, dsm_handle *handle);
extern bool mesh_worker_has_queued(int index);
extern dsm_segment *mesh_attach_call(dsm_handle handle, MeshCall **hdr, MeshMsg *request,
									 const char **blob, shm_mq_handle **mqh);
extern void mesh_worker_detach_slot(int index);
extern void mesh_worker_wake(int index);

/* stages.c */
extern uint64 mesh_clock_ns(void);
extern void mesh_stages_init(void);
extern const char *mesh_op_name(MeshOp op);
extern uint64 mesh_stages_count(MeshOp op, const MeshCallTimes *worker, uint64 started_ns);

/* stats.c */
extern void mesh_stats_init(void);
extern uint32 mesh_stat_backend(const char *name);
extern void mesh_stat_count(MeshOp op, uint32 backend, bool failed, uint64 elapsed_ns);
extern void mesh_stat_worker_turn(int index, int in_flight, uint64 wal_flushes);
extern void mesh_stat_worker_woke(int index);
extern void mesh_stat_worker_activity(int index, bool ended);

#endif							/* MESH_HANDOFF_H */
