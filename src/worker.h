/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The mesh worker's calls and the table of operations they perform.
 *
 * worker.c takes calls, runs the loop and sends replies; each operation
 * lives in a file of its own (worker_acquire.c, worker_exec.c,
 * worker_files.c, worker_release.c, worker_snapshot.c) and is described
 * here by a WorkerOpDef: how it starts, how the end of its driver run is
 * finished, and how large a response it accepts.  Only the worker process
 * includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_H
#define MESH_WORKER_H

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
	const WorkerOpDef *def;		/* what op means (worker_op); NULL: no such operation */
	MeshMsg		msg;			/* the request as it came (in the segment, or the call's copy) */
	MeshRequest req;			/* its fixed part: read spans with mesh_msg_string(&msg, ...) */
	const char *blob;
	Size		blob_len;
	const char *run_id;
	CallStep	step;
	MeshWorkspace ws;
	MeshBackend be;
	MeshDriverRun run;			/* the driver operation in flight, or the last one */
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
	void		(*start) (WorkerCall *call);
	/* the operation's driver run ended (call->run); NULL: it makes none */
	void		(*finish) (WorkerCall *call);
	/* the largest response the operation accepts */
	size_t		(*response_limit) (WorkerCall *call);

	/*
	 * Called in the transaction that loads the run, its row in call->ws:
	 * writes the operation's first rows there when it can start on the
	 * workspace as loaded, and says whether it did.  NULL: never.
	 */
	bool		(*start_at_load) (WorkerCall *call);
};

extern const WorkerOpDef *worker_op(MeshOp op);
extern size_t worker_small_response_limit(WorkerCall *call);

/* worker.c: the process */
extern int	worker_index;
extern char *worker_install_id;

/* worker.c: replies */
extern void queue_notice(WorkerCall *call, const char *text);
extern StringInfo begin_reply(WorkerCall *call, Size fixed_size);
extern void finish_with(WorkerCall *call, StringInfo head, const char *blob, Size blob_len);
extern void reply_row(WorkerCall *call, Datum row);
extern void reply_done(WorkerCall *call);
extern void reply_error(WorkerCall *call, int sqlerrcode, const char *message,
						const char *detail, const char *hint);
extern void reply_txn_error(WorkerCall *call, ErrorData *err);
extern void reply_backend_error(WorkerCall *call, const char *what, const MeshError *err);
/* src/worker_reply.c, for the loop */
extern void worker_settle_txn_time(WorkerCall *call);
extern void worker_flush_outbox(WorkerCall *call, uint64 flush_ns);

/* worker.c: the calls in progress and their steps */
extern void spawn_internal_release(const char *run_id, const char *reason);
extern WorkerCall *spawn_internal_call(MeshOp op, const char *run_id, StringInfo msg, bool counted);
extern bool run_is_changing(const char *run_id, WorkerCall *except);
extern void wake_parked(const char *run_id, const MeshError *failed);
extern bool load_backend(WorkerCall *call);
extern MeshOpState *begin_op(WorkerCall *call);
extern void start_op(WorkerCall *call, CallStep step, bool built, const MeshHttpRequest *req,
					 MeshResponseParser parse, void *out, size_t max_response);
extern const char *caller_role(WorkerCall *call);
extern void extend_calls_of_exec(int64 exec_id, long by_ms);

/* worker_acquire.c: declare, materialize, wake, the run token, tier climb */
extern void run_declare(WorkerCall *call);
extern bool wake_and_retry(WorkerCall *call, const MeshError *merr);
extern void begin_materialize(WorkerCall *call);
extern void finish_acquire(WorkerCall *call);
extern void wake_broker(void);
extern bool deliver_token_first(WorkerCall *call);
extern void finish_token_delivery(WorkerCall *call);
extern bool broker_listening(WorkerCall *call);
extern void climb_tier(WorkerCall *call);

/* worker_exec.c: exec, cancel, budgets, egress notices, redaction */
extern bool exec_start_at_load(WorkerCall *call);
extern void keep_exec_row(WorkerCall *call, XLogRecPtr lsn);
extern void start_exec(WorkerCall *call);
extern void finish_exec(WorkerCall *call);
extern size_t exec_response_limit(WorkerCall *call);
extern void cancel_exec(WorkerCall *call);
extern void finish_cancel(WorkerCall *call);

/* worker_exec.c, shared with background commands */
extern void finish_exec_failed(WorkerCall *call);
extern bool record_exec_end_only(WorkerCall *call, const MeshExecRecord *rec);
extern MeshExecStatus exec_status(const MeshExecResult *r);
extern const char *exec_disk_quota_error(const MeshExecResult *r);
extern void charge_budget(WorkerCall *call, double charged);
extern void notice_egress_denials(WorkerCall *call, const char *denials_text);

/* worker_background.c: background commands (start, follow, kill) */
extern void finish_background(WorkerCall *call);
extern size_t background_response_limit(WorkerCall *call);
extern void follow_when_due(WorkerCall *call, TimestampTz now);
extern void detach_follower(WorkerCall *call);
extern void spawn_followers(void);
extern void start_follow(WorkerCall *call);
extern bool admit_background(WorkerCall *call, bool reply);
extern void leave_background_slot(WorkerCall *call);
extern void start_exec_kill(WorkerCall *call);
extern void finish_exec_kill(WorkerCall *call);
extern void start_exec_extend(WorkerCall *call);
extern void finish_exec_extend(WorkerCall *call);
extern void exec_call_extended(WorkerCall *call, long by_ms);
extern bool exec_ended_this_turn;

/* worker_failures.c: a backend's failure class in the caller's terms */
extern int	failure_sqlerrcode(MeshFailure failure);
extern const char *failure_hint(MeshFailure failure);

/* worker_recover.c: kills the worker sends for itself, recovery at its start */
typedef struct ExecKill ExecKill;
extern ExecKill *start_kill(const MeshBackend *be, const char *ref, int64 exec_id);
extern void await_kills(List *kills, TimestampTz deadline);
extern void worker_recover(void);

/* worker_files.c: read and write */
extern void start_read(WorkerCall *call);
extern void finish_read(WorkerCall *call);
extern size_t read_response_limit(WorkerCall *call);
extern void start_write(WorkerCall *call);
extern void finish_write(WorkerCall *call);

/* worker_snapshot.c: capture a run's /workspace (mesh_snapshot) */
extern void start_snapshot(WorkerCall *call);
extern void finish_snapshot(WorkerCall *call);

/* worker_release.c: release, the caller's and the worker's own */
extern void start_release(WorkerCall *call);
extern void finish_release(WorkerCall *call);

#endif							/* MESH_WORKER_H */
