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

#define MESH_MAX_WORKERS 16
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
extern void mesh_stages_count(MeshOp op, const MeshCallTimes *worker, uint64 started_ns);

#endif							/* MESH_HANDOFF_H */
