/*-------------------------------------------------------------------------
 *
 * sandboxd_parse.h
 *	  The sandboxd driver's reader of framed exec answers.
 *
 * mesh-sandboxd answers an exec with output "tail", and every GET of a
 * background exec's output, as one compact JSON line, "\n", then the
 * stdout bytes and the stderr bytes, raw (docs/protocol.md).  These bytes
 * come from the daemon, so sandboxd_parse.c reads them with jansson alone
 * (no palloc, no ereport): test/fuzz/fuzz_sandboxd feeds it anything.
 * sandboxd.c turns what it finds into MeshExecResult and MeshExecProgress.
 * Stream pointers point into the body passed in.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_SANDBOXD_PARSE_H
#define MESH_SANDBOXD_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* A framed answer: the document and, when it announced them, the raw streams. */
typedef struct SandboxdFrame
{
	json_t	   *doc;			/* the caller decrefs */
	bool		raw;			/* stdout_kept/stderr_kept given: the streams follow */
	const char *stdout_data;
	size_t		stdout_len;
	const char *stderr_data;
	size_t		stderr_len;
} SandboxdFrame;

/* Where a background exec's answer stands. */
typedef struct SandboxdProgress
{
	bool		running;
	int64_t		stdout_from;
	int64_t		stderr_from;
	int64_t		stdout_total;
	int64_t		stderr_total;
	const char *error_code;		/* an end the daemon could not carry: its code, else NULL */
	const char *error_message;	/* "" when it gave none */
} SandboxdProgress;

extern bool sandboxd_frame_read(const char *body, size_t len, SandboxdFrame *frame);
extern bool sandboxd_progress_read(const SandboxdFrame *frame, SandboxdProgress *progress);

#endif							/* MESH_SANDBOXD_PARSE_H */
