/*-------------------------------------------------------------------------
 *
 * worker_snapshot.h
 *	  The snapshot operation: capturing a run's /workspace
 *	  (src/worker_snapshot.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_SNAPSHOT_H
#define MESH_WORKER_SNAPSHOT_H

#include "worker_op.h"

extern void start_snapshot(WorkerCall *call);
extern void finish_snapshot(WorkerCall *call);

#endif							/* MESH_WORKER_SNAPSHOT_H */
