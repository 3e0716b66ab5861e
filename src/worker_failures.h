/*-------------------------------------------------------------------------
 *
 * worker_failures.h
 *	  A backend's failure class in the caller's terms (src/worker_failures.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_FAILURES_H
#define MESH_WORKER_FAILURES_H

#include "backends/backend.h"

extern int	failure_sqlerrcode(MeshFailure failure);
extern const char *failure_hint(MeshFailure failure);

#endif							/* MESH_WORKER_FAILURES_H */
