/*-------------------------------------------------------------------------
 *
 * worker_http.h
 *	  The worker's HTTP engine: libcurl multi driven from the worker's
 *	  wait loop, so one worker overlaps many backend calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_HTTP_H
#define MESH_WORKER_HTTP_H

#include "postgres.h"

#include "storage/latch.h"

#include "backends/backend.h"

typedef struct MeshTransfer MeshTransfer;

extern void mesh_http_init(void);
extern MeshTransfer *mesh_http_start(const MeshHttpRequest *req, size_t max_response, void *owner);
extern void mesh_http_abort(MeshTransfer *t);
extern int	mesh_http_drive(void);
extern bool mesh_http_is_done(MeshTransfer *t);
extern void mesh_http_response(MeshTransfer *t, MeshHttpResponse *resp);
extern void mesh_http_free(MeshTransfer *t);
extern WaitEventSet *mesh_http_wait_set(long *timeout_ms);
extern void mesh_http_blocking(const MeshHttpRequest *req, long timeout_ms, MeshHttpResponse *resp);

#endif							/* MESH_WORKER_HTTP_H */
