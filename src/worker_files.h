/*-------------------------------------------------------------------------
 *
 * worker_files.h
 *	  The read and write operations (src/worker_files.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_FILES_H
#define MESH_WORKER_FILES_H

#include "worker_op.h"

extern void start_read(WorkerCall *call);
extern void finish_read(WorkerCall *call);
extern void start_write(WorkerCall *call);
extern void finish_write(WorkerCall *call);

#endif							/* MESH_WORKER_FILES_H */
