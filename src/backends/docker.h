/*-------------------------------------------------------------------------
 *
 * docker.h
 *	  The scripts the docker driver runs inside a container (an exec's
 *	  wrapper, a background command's), and the reader of what a background
 *	  command's output script prints.
 *
 * docker_background.c holds them with the C library alone (no palloc, no
 * ereport, no server runtime), so the very scripts the driver sends and the
 * reader of the bytes a container answers with can be run against a real
 * container by a test (test/e2e/docker_background.t), unit-tested and
 * fuzzed (test/docker/, test/fuzz/) outside PostgreSQL, while docker_exec.c turns
 * them into Engine API requests, MeshExecProgress and MeshErrors.
 *
 * A background command's record is the directory /run/mesh/bg/<key>/ in the
 * container's scratch volume: out and err (each stream whole), in (stdin),
 * claimed (the uptime of the claim), wrapper (the supervising shell's pid,
 * its start time and the uptime it began at), pid (the command's process
 * group), killed (signals a kill call sent), timeout (the timeout fired)
 * and end, written atomically when the command has ended: "<exit status>
 * <timed out> <killed> <stdout bytes> <stderr bytes> <uptime at start>
 * <uptime at end>".
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_DOCKER_H
#define MESH_DOCKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DOCKER_SCRATCH "/run/mesh"	/* the driver's scratch volume in every container */
#define DOCKER_BG_DIR DOCKER_SCRATCH "/bg"
/* the output script's sleep between looks at the spool, in seconds and in ms */
#define DOCKER_BG_POLL "0.05"
#define DOCKER_BG_POLL_MS 50

/* Scripts run as ["/bin/sh", "-c", script, "mesh", args...]; see each one. */
extern const char docker_exec_wrapper[];
extern const char docker_bg_claim_script[];
extern const char docker_bg_wrapper[];
extern const char docker_bg_output_script[];
extern const char docker_bg_forget_script[];
extern const char docker_kill_script[];

/* What the output script found about the command. */
typedef enum DockerBgState
{
	DOCKER_BG_MISSING,			/* no record under that key */
	DOCKER_BG_RUNNING,			/* its wrapper is alive (or not started yet) */
	DOCKER_BG_LOST,				/* its wrapper is gone without an end (container restarted) */
	DOCKER_BG_ENDED				/* the end file is there */
} DockerBgState;

/* One answer of the output script: its header line, then the bytes it names. */
typedef struct DockerBgOutput
{
	DockerBgState state;
	int64_t		out_size;		/* bytes of each stream in the spool (at most its total once ended) */
	int64_t		err_size;
	int64_t		out_from;		/* the offsets served, as asked */
	int64_t		err_from;
	const char *out_data;		/* point into the answer */
	size_t		out_len;
	const char *err_data;
	size_t		err_len;
	/* from the end file (DOCKER_BG_ENDED only) */
	int			exit_code;
	bool		timed_out;
	bool		killed;			/* a kill call's signal ended it */
	int64_t		out_total;
	int64_t		err_total;
	double		wall_seconds;
} DockerBgOutput;

extern bool docker_bg_output_parse(const char *body, size_t len, DockerBgOutput *out);
extern bool docker_bg_output_reaches_end(const DockerBgOutput *out);
extern bool docker_exec_key_valid(const char *key);
extern bool docker_signal_valid(const char *signal);

#endif							/* MESH_DOCKER_H */
