/*-------------------------------------------------------------------------
 *
 * worker_reply.h
 *	  A worker's messages to its callers (src/worker_reply.c): queued per
 *	  call, sent once the turn that made them is durable.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_REPLY_H
#define MESH_WORKER_REPLY_H

#include "worker_op.h"

extern void queue_notice(WorkerCall *call, const char *text);
extern StringInfo begin_reply(WorkerCall *call, Size fixed_size);
extern void finish_with(WorkerCall *call, StringInfo head, const char *blob, Size blob_len);
extern void reply_row(WorkerCall *call, Datum row);
extern void reply_done(WorkerCall *call);
extern void reply_error(WorkerCall *call, int sqlerrcode, const char *message,
						const char *detail, const char *hint);
extern void reply_txn_error(WorkerCall *call, ErrorData *err);
extern void reply_backend_error(WorkerCall *call, const char *what, const MeshError *err);

/* for the loop */
extern void worker_settle_txn_time(WorkerCall *call);
extern void worker_flush_outbox(WorkerCall *call, uint64 flush_ns);

#endif							/* MESH_WORKER_REPLY_H */
