/*-------------------------------------------------------------------------
 *
 * worker_op.h
 *	  What a mesh worker's call is, and what an operation is: the contract
 *	  between the loop (worker.c), whose table names one WorkerOpDef per
 *	  operation, and the files that perform them (worker_acquire.c,
 *	  worker_exec.c, worker_background.c, worker_files.c, worker_release.c,
 *	  worker_snapshot.c).  Types only: the functions are each file's own
 *	  (worker_call.h is the layer they all stand on).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_OP_H
#define MESH_WORKER_OP_H

#include "postgres.h"

#include "mesh_json.h"

#include "access/xlog.h"
#include "lib/ilist.h"
#include "utils/timestamp.h"

#include "backends/backend.h"
#include "handoff.h"
#include "runner.h"
#include "store.h"

typedef enum CallStep
{
	STEP_START,					/* resolve the run's workspace */
	STEP_PARKED,				/* another call of this run is materializing it */
	STEP_ACQUIRING,				/* this call materializes: acquire in flight */
	STEP_DELIVERING,			/* the run token is being written into the workspace */
	STEP_AWAITING_BROKER,		/* the token is there: waiting for the broker to listen */
	STEP_OPERATING,				/* the operation's request is in flight */
	STEP_KILLING,				/* cancelled exec: kill request in flight */
	STEP_FOLLOWING,				/* a background command's output request in flight */
	STEP_FOLLOW_PAUSED,			/* ... the next one waits until wait_until (rate bound) */
	STEP_FORGETTING,			/* ... its end is stored: the backend may drop its record */
	STEP_FINISHED				/* reply queued (or caller gone) */
} CallStep;

typedef struct WorkerOpDef WorkerOpDef;

typedef struct WorkerCall
{
	dlist_node	node;
	MemoryContext cxt;
	dsm_segment *seg;
	MeshCall   *hdr;
	shm_mq_handle *mqh;
	MeshOp		op;
	const WorkerOpDef *def;		/* what op means (the loop's table); NULL: no such operation */
	MeshMsg		msg;			/* the request as it came (in the segment, or the call's copy) */
	MeshRequest req;			/* its fixed part: read spans with mesh_msg_string(&msg, ...) */
	const char *blob;
	Size		blob_len;
	const char *run_id;
	CallStep	step;
	MeshWorkspace ws;
	MeshBackend be;
	MeshDriverRun run;			/* the driver operation in flight, or the last one */
	void		(*on_end) (struct WorkerCall *call);	/* takes the run's end (start_op) */
	void		(*on_due) (struct WorkerCall *call);	/* STEP_FOLLOW_PAUSED: goes on at wait_until */
	union						/* what the run's parser fills */
	{
		MeshCapabilities caps;
		MeshExecResult exec;
		MeshFileData file;
		MeshReleaseOutcome release;
		MeshSnapshotInfo snapshot;
		MeshExecProgress progress;
		int64_t		timeout_ms; /* an extension's: the backend's whole timeout */
	}			out;
	int64		exec_id;
	MeshExecSpec spec;
	TimestampTz op_started;
	List	   *outbox;			/* OutMessages not yet sent */
	bool		caller_gone;
	bool		budget_bound;	/* the budget, not the caller, set the timeout */
	List	   *delivered;		/* secrets delivered into this exec's environment */
	char	   *secret_body;	/* a request body holding a secret, wiped once sent */
	bool		woke_once;		/* already woke a stopped workspace for this call */
	bool		started_at_load;	/* the operation's rows were written with the load */
	XLogRecPtr	load_lsn;		/* ... and where the load's commit ended */
	json_t	   *env;			/* the command's environment, built for the driver */
	MeshCallTimes times;		/* where the call's time went, sent with the reply */
	uint64		txn_mark;		/* mesh_txn_time_ns when last added to times */
	uint64		http_started;	/* when the request in flight was started */
	TimestampTz wait_until;		/* STEP_AWAITING_BROKER: go on at the latest then */
	int64		snapshot_id;	/* the capture in flight (mesh_snapshot) */
	struct BackgroundFollow *follow;	/* a background command followed (worker_background.c) */
	bool		uncounted;		/* not among mesh.worker_max_calls (a follower) */
	bool		background_slot;	/* among mesh.max_background_per_worker */
} WorkerCall;

/* What the worker needs to know about an operation, whichever it is. */
typedef enum WorkerOpScope
{
	OP_SCOPE_RUN,				/* only the run's row (declare): no workspace, no backend */
	OP_SCOPE_ANY_WORKSPACE,		/* the workspace in whatever state (release) */
	OP_SCOPE_READY_WORKSPACE	/* a materialized workspace the run can reach */
} WorkerOpScope;

struct WorkerOpDef
{
	const char *noun;			/* what the caller asked for, as an error's subject */
	WorkerOpScope scope;
	/* whether, while its request is in flight, the run's other calls wait */
	bool		exclusive;
	void		(*start) (WorkerCall *call);
	/* the end of the operation's own request (start passes it to start_op); NULL: none */
	void		(*finish) (WorkerCall *call);

	/*
	 * Called in the transaction that loads the run, its row in call->ws:
	 * writes the operation's first rows there when it can start on the
	 * workspace as loaded, and says whether it did.  NULL: never.
	 */
	bool		(*start_at_load) (WorkerCall *call);
	/* the caller left while the request is in flight: stop the work (NULL: let it end) */
	void		(*cancel) (WorkerCall *call);
};

#endif							/* MESH_WORKER_OP_H */
