/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The mesh worker's calls and the table of operations they perform.
 *
 * worker.c takes calls, runs the loop and sends replies; each operation
 * lives in a file of its own (worker_acquire.c, worker_exec.c,
 * worker_files.c, worker_release.c, worker_snapshot.c) and is described here by a WorkerOpDef:
 * how it starts, how its response is finished, and how large a response it
 * accepts.  Only the worker process includes this header.
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
#include "store.h"
#include "worker_http.h"

typedef enum CallStep
{
	STEP_START,					/* resolve the run's workspace */
	STEP_PARKED,				/* another call of this run is materializing it */
	STEP_ACQUIRING,				/* this call materializes: acquire in flight */
	STEP_DELIVERING,			/* the run token is being written into the workspace */
	STEP_OPERATING,				/* the operation's request is in flight */
	STEP_KILLING,				/* cancelled exec: kill request in flight */
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
	json_t	   *req;
	const char *blob;
	Size		blob_len;
	const char *run_id;
	CallStep	step;
	MeshWorkspace ws;
	MeshBackend be;
	MeshTransfer *transfer;
	MeshOpState opstate;		/* the driver's state for the operation in flight */
	int64		exec_id;
	MeshExecSpec spec;
	XLogRecPtr	exec_row_lsn;	/* exec row's commit, flushed once sent */
	TimestampTz op_started;
	List	   *outbox;			/* OutMessages not yet sent */
	MeshTransfer *kept;			/* a finished transfer whose body a queued reply sends */
	bool		caller_gone;
	bool		budget_bound;	/* the budget, not the caller, set the timeout */
	List	   *delivered;		/* secrets delivered into this exec's environment */
	char	   *secret_body;	/* a request body holding a secret, wiped once sent */
	bool		woke_once;		/* already woke a stopped workspace for this call */
	int64		snapshot_id;	/* the capture in flight (mesh_snapshot) */
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
	/* the response to the operation's request; NULL: it makes none */
	void		(*finish) (WorkerCall *call, const MeshHttpResponse *resp);
	/* the largest response the operation accepts */
	size_t		(*response_limit) (WorkerCall *call);
	bool		reply_sends_body;	/* the reply carries the response body (a read) */
};

extern const WorkerOpDef *worker_op(MeshOp op);
extern size_t worker_small_response_limit(WorkerCall *call);

/* worker.c: the process */
extern int	worker_index;
extern char *worker_install_id;

/* worker.c: replies */
extern void queue_message(WorkerCall *call, json_t *doc, const char *blob, Size blob_len);
extern void reply_ok(WorkerCall *call, json_t *doc, const char *blob, Size blob_len);
extern void reply_error(WorkerCall *call, const char *sqlstate, const char *message,
						const char *detail, const char *hint);
extern void reply_txn_error(WorkerCall *call, ErrorData *err);
extern const char *failure_sqlstate(MeshFailure failure);
extern const char *failure_hint(MeshFailure failure);
extern void reply_backend_error(WorkerCall *call, const char *what, const MeshError *err);

/* worker.c: the calls in progress and their steps */
extern void spawn_internal_release(const char *run_id, const char *reason);
extern bool run_is_changing(const char *run_id, WorkerCall *except);
extern void wake_parked(const char *run_id, const MeshError *failed);
extern bool load_backend(WorkerCall *call);
extern void start_transfer(WorkerCall *call, MeshHttpRequest *req, size_t max_response);
extern MeshOpState *begin_op(WorkerCall *call);
extern bool continue_op(WorkerCall *call, MeshStepResult r, size_t max_response);
extern bool workspace_has_capability(WorkerCall *call, const char *name);
extern const char *caller_role(WorkerCall *call);

/* worker_acquire.c: declare, materialize, wake, the run token, tier climb */
extern void run_declare(WorkerCall *call);
extern bool wake_and_retry(WorkerCall *call, const MeshError *merr);
extern void begin_materialize(WorkerCall *call);
extern void finish_acquire(WorkerCall *call, const MeshHttpResponse *resp);
extern void wake_broker(void);
extern bool deliver_token_first(WorkerCall *call);
extern void finish_token_delivery(WorkerCall *call, const MeshHttpResponse *resp);
extern void climb_tier(WorkerCall *call);

/* worker_exec.c: exec, cancel, budgets, egress notices, redaction */
extern void start_exec(WorkerCall *call);
extern void finish_exec(WorkerCall *call, const MeshHttpResponse *resp);
extern size_t exec_response_limit(WorkerCall *call);
extern void cancel_exec(WorkerCall *call);
extern void finish_cancel(WorkerCall *call, const MeshHttpResponse *resp);

/* worker_files.c: read and write */
extern void start_read(WorkerCall *call);
extern void finish_read(WorkerCall *call, const MeshHttpResponse *resp);
extern size_t read_response_limit(WorkerCall *call);
extern void start_write(WorkerCall *call);
extern void finish_write(WorkerCall *call, const MeshHttpResponse *resp);

/* worker_snapshot.c: capture a run's /workspace (mesh_snapshot) */
extern void start_snapshot(WorkerCall *call);
extern void finish_snapshot(WorkerCall *call, const MeshHttpResponse *resp);

/* worker_release.c: release, the caller's and the worker's own */
extern void start_release(WorkerCall *call);
extern void finish_release(WorkerCall *call, const MeshHttpResponse *resp);

#endif							/* MESH_WORKER_H */
