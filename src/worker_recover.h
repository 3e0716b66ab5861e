/*-------------------------------------------------------------------------
 *
 * worker_recover.h
 *	  A worker's start and exit (src/worker_recover.c): what its
 *	  predecessor left running, and the kills it sends for itself.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_RECOVER_H
#define MESH_WORKER_RECOVER_H

#include "worker_op.h"

typedef struct ExecKill ExecKill;

extern ExecKill *start_kill(const MeshBackend *be, const char *ref, int64 exec_id);
extern void await_kills(List *kills, TimestampTz deadline);
extern void worker_recover(void);

#endif							/* MESH_WORKER_RECOVER_H */
