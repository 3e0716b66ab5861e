/*-------------------------------------------------------------------------
 *
 * worker_release.h
 *	  The release operation, the caller's and the worker's own
 *	  (src/worker_release.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_RELEASE_H
#define MESH_WORKER_RELEASE_H

#include "worker_op.h"

extern void start_release(WorkerCall *call);
extern void finish_release(WorkerCall *call);

#endif							/* MESH_WORKER_RELEASE_H */
