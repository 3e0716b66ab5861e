/*-------------------------------------------------------------------------
 *
 * worker_acquire.h
 *	  The stage that makes a run's workspace usable (src/worker_acquire.c):
 *	  declaring the run, materializing or waking its workspace, the run
 *	  token, the tier climb; and the run's parked calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_ACQUIRE_H
#define MESH_WORKER_ACQUIRE_H

#include "worker_op.h"

/* the acquire operation: declaring the run */
extern void run_declare(WorkerCall *call);

/* the stage every call on a workspace passes */
extern bool load_backend(WorkerCall *call);
extern void begin_materialize(WorkerCall *call);
extern bool deliver_token_first(WorkerCall *call);
extern bool broker_listening(WorkerCall *call);
extern void wake_parked(const char *run_id, const MeshError *failed);

/* for the operations */
extern bool wake_and_retry(WorkerCall *call, const MeshError *merr);
extern void climb_tier(WorkerCall *call);
extern void wake_broker(void);

#endif							/* MESH_WORKER_ACQUIRE_H */
