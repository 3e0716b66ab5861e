/*-------------------------------------------------------------------------
 *
 * worker_call.h
 *	  The calls a mesh worker has in progress (src/worker_call.c): taking
 *	  them on and letting them go, the worker's own calls, the bounds on
 *	  them, and starting a call's driver run.  The layer every operation
 *	  file and the loop stand on; it names no operation.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_CALL_H
#define MESH_WORKER_CALL_H

#include "worker_op.h"

/* the process */
extern int	worker_index;
extern char *worker_install_id;

/* the calls in progress, and how many of them count against mesh.worker_max_calls */
extern dlist_head worker_calls;
extern int	worker_ncalls;

extern void worker_calls_init(int index);
extern WorkerCall *worker_call_attach(dsm_handle handle);
extern void worker_call_add(WorkerCall *call);
extern void worker_call_free(WorkerCall *call);
extern void worker_call_detach_caller(WorkerCall *call);
extern WorkerCall *spawn_internal_call(MeshOp op, const char *run_id, StringInfo msg, bool counted);
extern void spawn_internal_release(const char *run_id, const char *reason);
extern bool run_is_changing(const char *run_id, WorkerCall *except);

/* background commands' slots (mesh.max_background_per_worker) */
extern int	worker_background_slots_used(void);
extern void take_background_slot(WorkerCall *call);

/* a call's driver run */
extern MeshOpState *begin_op(WorkerCall *call);
extern void start_op(WorkerCall *call, CallStep step, bool built, const MeshHttpRequest *req,
					 MeshResponseParser parse, void *out, size_t max_response,
					 void (*on_end) (WorkerCall *call));
extern size_t worker_small_response_limit(WorkerCall *call);
extern const char *caller_role(WorkerCall *call);

#endif							/* MESH_WORKER_CALL_H */
