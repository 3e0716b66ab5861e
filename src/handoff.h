/*-------------------------------------------------------------------------
 *
 * handoff.h
 *	  Caller <-> worker hand-off in shared memory.
 *
 * A caller (a backend running mesh_exec() and friends) puts its request in
 * a dynamic shared memory segment, pushes the segment's handle onto the
 * queue of the worker that owns the run, and waits on a shm_mq in the same
 * segment for messages: zero or more notices, then one final reply.
 *
 * No queue table: a worker could not see a caller's uncommitted rows, and a
 * caller that held a row the worker needs would deadlock invisibly.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_HANDOFF_H
#define MESH_HANDOFF_H

#include "postgres.h"

#include "mesh_json.h"

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

typedef enum MeshOp
{
	MESH_OP_ACQUIRE = 1,		/* declare a run's workspace (no backend call) */
	MESH_OP_EXEC,
	MESH_OP_READ_FILE,
	MESH_OP_WRITE_FILE,
	MESH_OP_RELEASE,
	MESH_OP_SNAPSHOT,			/* capture the run's /workspace (mesh_snapshot) */
	MESH_OP_SWEEP				/* to the reaper: sweep now, reply with what it did */
} MeshOp;

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
	dsm_handle	queue[MESH_QUEUE_LEN];
} MeshWorkerSlot;

/* The embedded mesh-sandboxd as its supervisor (src/launcher.c) last saw it. */
typedef enum MeshDaemonState
{
	MESH_DAEMON_ABSENT = 0,		/* not embedded, not installed, or the server is stopping */
	MESH_DAEMON_STARTING,		/* being (re)started: calls wait for it, boundedly */
	MESH_DAEMON_READY			/* serving requests */
} MeshDaemonState;

typedef struct MeshShared
{
	int			nworkers;
	pg_atomic_uint64 next_exec_key;
	int			broker_procno;	/* the broker's PGPROC number, -1 when not running */
	pg_atomic_uint32 daemon_state;	/* MeshDaemonState */
	ConditionVariable daemon_ready; /* broadcast when daemon_state changes */
	MeshWorkerSlot workers[MESH_MAX_WORKERS + 1];	/* workers, then the reaper */
} MeshShared;

/*
 * Header of a call segment.  Offsets, never pointers: the segment is mapped
 * at different addresses in caller and worker.
 */
typedef struct MeshCall
{
	uint32		magic;
	MeshOp		op;
	Oid			database;
	Oid			user;
	pg_atomic_uint32 cancelled; /* set by the caller when it stops waiting */
	Size		json_off;
	Size		json_len;
	Size		blob_off;
	Size		blob_len;
	Size		mq_off;
} MeshCall;

/* A message from the worker: a notice, or the final reply. */
typedef struct MeshReply
{
	json_t	   *doc;
	char	   *blob;
	Size		blob_len;
} MeshReply;

extern MeshShared *mesh_shared;

extern void mesh_shmem_request(void);
extern void mesh_shmem_startup(void);
extern int	mesh_worker_for_run(const char *run_id);

/* caller side */
extern void mesh_call(MeshOp op, const char *run_id, json_t *request,
					  const char *blob, Size blob_len, MeshReply *reply);
extern void mesh_call_slot(int slot, MeshOp op, json_t *request,
						   const char *blob, Size blob_len, MeshReply *reply);
extern TimestampTz mesh_call_deadline;	/* 0: wait as long as it takes */
extern void mesh_wait_for_embedded_daemon(TimestampTz deadline);
extern void mesh_set_daemon_state(MeshDaemonState state);

/* worker side */
extern void mesh_worker_attach_slot(int index);
extern bool mesh_worker_pop(int index, dsm_handle *handle);
extern bool mesh_worker_has_queued(int index);
extern dsm_segment *mesh_attach_call(dsm_handle handle, MeshCall **hdr, shm_mq_handle **mqh);
extern void mesh_worker_detach_slot(int index);

/* message framing shared by both sides */
extern void mesh_reply_encode(StringInfo out, json_t *doc);

#endif							/* MESH_HANDOFF_H */
