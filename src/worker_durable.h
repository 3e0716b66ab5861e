/*-------------------------------------------------------------------------
 *
 * worker_durable.h
 *	  When a worker's commits reach the disk (src/worker_durable.c): the
 *	  operations say what they committed (worker_want_*), the loop makes
 *	  each turn durable once.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_DURABLE_H
#define MESH_WORKER_DURABLE_H

#include "postgres.h"

#include "access/xlogdefs.h"

extern void worker_want_durable(XLogRecPtr lsn);
extern void worker_want_written(XLogRecPtr lsn);
extern void worker_want_reply_durable(XLogRecPtr lsn);
extern uint64 worker_make_turn_durable(int self, uint32 own_open_calls, bool *may_reply);
extern long worker_gather_timeout(void);
extern bool exec_ended_this_turn;

#endif							/* MESH_WORKER_DURABLE_H */
