/*-------------------------------------------------------------------------
 *
 * worker_exec.h
 *	  The exec operation (src/worker_exec.c); mesh_exec_start's command
 *	  starts the same way, its end is worker_background.c's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_EXEC_H
#define MESH_WORKER_EXEC_H

#include "worker_op.h"

extern bool exec_start_at_load(WorkerCall *call);
extern void start_exec(WorkerCall *call);
extern void finish_exec(WorkerCall *call);
extern void cancel_exec(WorkerCall *call);

#endif							/* MESH_WORKER_EXEC_H */
