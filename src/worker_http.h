/*-------------------------------------------------------------------------
 *
 * worker_http.h
 *	  The HTTP engine of a process that calls backends: libcurl multi
 *	  driven from the process's wait loop, so one worker overlaps many
 *	  backend calls.  Used through the driver runner (runner.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_HTTP_H
#define MESH_WORKER_HTTP_H

/* Idle connections curl keeps for reuse: descriptors the worker holds besides its calls'. */
#define MESH_HTTP_CONNECTION_CACHE 64

#include "postgres.h"

#include "storage/latch.h"

#include "backends/backend.h"

typedef struct MeshTransfer MeshTransfer;

/*
 * Apply one curl option unless an earlier one already failed; the first
 * failure sticks, so a caller checks one result after all its options.
 */
#define MESH_CURL_SETOPT(rc, easy, option, value) \
	((rc) == CURLE_OK ? ((rc) = curl_easy_setopt((easy), (option), (value))) : (rc))

extern void mesh_http_init(void);
extern MeshTransfer *mesh_http_start(const MeshHttpRequest *req, size_t max_response);
extern void mesh_http_abort(MeshTransfer *t);
extern int	mesh_http_drive(void);
extern pgsocket mesh_http_socket(void);
extern long mesh_http_timeout(void);
extern bool mesh_http_is_done(MeshTransfer *t);
extern void mesh_http_response(MeshTransfer *t, MeshHttpResponse *resp);
extern void mesh_http_free(MeshTransfer *t);
extern bool mesh_http_extend(MeshTransfer *t, long by_ms);

#endif							/* MESH_WORKER_HTTP_H */
