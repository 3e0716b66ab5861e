/*-------------------------------------------------------------------------
 *
 * exec_output.h
 *	  An exec's output: stored whole, clamped for people.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_EXEC_OUTPUT_H
#define MESH_EXEC_OUTPUT_H

#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"

/* One stream as the worker stores it: the kept bytes and how many came before. */
typedef struct MeshOutputStream
{
	const char *data;
	size_t		len;
	int64		dropped;
} MeshOutputStream;

extern const char *exec_output_store(int64 exec_id, const MeshOutputStream streams[2],
									 int64 *stored);
extern int64 exec_output_allowance(int64 exec_id, const char **reason);
extern const char *exec_output_stop_setting(const char *reason);
extern void exec_output_share(int64 allowed, const size_t len[2], size_t share[2]);
extern void exec_output_store_stream(int64 exec_id, int which, const MeshOutputStream *s);
extern void exec_output_clamp(char **data, size_t *len, int64 total, long max_bytes,
							  bool *truncated);

/* text a PostgreSQL text column can hold: invalid UTF-8 and NUL become U+FFFD */
extern char *mesh_sanitize_text(const char *data, size_t len);

#endif							/* MESH_EXEC_OUTPUT_H */
