/*-------------------------------------------------------------------------
 *
 * worker_background.h
 *	  Background commands (src/worker_background.c): their start's end,
 *	  following them, signalling them, extending their deadline.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_BACKGROUND_H
#define MESH_WORKER_BACKGROUND_H

#include "worker_op.h"

extern void finish_background(WorkerCall *call);
extern void start_follow(WorkerCall *call);
extern void spawn_followers(void);
extern void start_exec_kill(WorkerCall *call);
extern void start_exec_extend(WorkerCall *call);

#endif							/* MESH_WORKER_BACKGROUND_H */
