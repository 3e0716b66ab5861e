/*-------------------------------------------------------------------------
 *
 * docker_api.h
 *	  What the docker driver's files share: the state of one operation and
 *	  the Engine API helpers every operation is built from.
 *
 * The driver is split by operation so a reader finds each by file name:
 * docker.c (config, capabilities, acquire, release, list, the driver's
 * vtable), docker_exec.c (exec, kill, background commands), docker_files.c
 * (file read and write), and docker_api.c (request framing, errors, the
 * script execs and the tar archives they all use).  Only those files
 * include this header; docker.h stays the driver's face to tests and fuzzers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_DOCKER_API_H
#define MESH_DOCKER_API_H

#include "mesh_json.h"

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

#include "backends/backend.h"
#include "backends/docker.h"

#define DOCKER_WORKSPACE "/workspace"

/* Phases of the multi-step operations; each names the answer it awaits. */
typedef enum DockerPhase
{
	PH_CREATE,					/* container create */
	PH_INSPECT,					/* container inspect after a name conflict */
	PH_START,					/* container start */
	PH_STDIN,					/* archive upload of the stdin file */
	PH_EXEC_CREATE,
	PH_EXEC_START,
	PH_EXEC_INSPECT,
	PH_ARCHIVE,					/* archive download or upload of a file */
	PH_LAUNCH,					/* exec create of a background command's wrapper */
	PH_LAUNCH_START				/* its detached start */
} DockerPhase;

/* The driver's state for one operation (MeshOpState.data). */
typedef struct DockerOp
{
	DockerPhase phase;
	const char *ref;
	const char *install_id;
	bool		limits_dropped;	/* the daemon warned it cannot apply a limit */
	/* exec */
	MeshHttpRequest create;		/* the exec create, sent after the stdin upload */
	MeshHttpRequest upload;		/* a background command's stdin upload, after its claim */
	bool		has_stdin;
	long		wait_ms;		/* how long an output call may wait in the container */
	long		timeout_ms;
	const char *key;
	long		kept;			/* bytes of each stream that come back */
	TimestampTz started;
	char	   *exec_id;
	StringInfoData out;
	StringInfoData err;
	/* files */
	const char *rel;			/* confined path relative to the workspace */
	int			mode;
	const char *data;
	size_t		len;
	void		(*after_check) (const MeshBackend *be, struct DockerOp *op, const char *resolved,
								MeshHttpRequest *req);
	/* release */
	bool		keep;			/* stop (hibernate) rather than remove */
} DockerOp;

/* docker_api.c: config, requests and errors */
/* the configured workspace user ("uid:gid"), or the default */
extern const char *docker_config_user(const MeshBackend *be);
/* start a request to the daemon: socket, API version, deadline */
extern void docker_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method,
						 const char *path);
/* Docker's own error text ({"message": ...}), or "" */
extern char *docker_message(const MeshHttpResponse *resp);
/* whether the daemon answered 2xx; otherwise err says what failed */
extern bool docker_ok(const MeshHttpResponse *resp, const MeshBackend *be, const char *doing,
					  MeshError *err);
/* the answer as a JSON object or array, or a protocol error */
extern json_t *docker_parse_object(const MeshHttpResponse *resp, const MeshBackend *be, MeshError *err);
/* the state of a new operation on container REF, in st->data */
extern DockerOp *docker_op_new(MeshOpState *st, const char *ref);

/* docker_api.c: tar (ustar) for the archive API */
/* one ustar header block: name, type, mode, owner, size */
extern void docker_tar_header(StringInfo tar, const char *name, char type, int mode, const char *user,
					   size_t size);
/* a regular file entry; a name over 100 bytes travels in a pax header */
extern void docker_tar_file(StringInfo tar, const char *name, int mode, const char *user,
					 const char *data, size_t len);
/* the two zero blocks that end an archive */
extern void docker_tar_end(StringInfo tar);
/* the first regular file of a tar stream (extended headers skipped) */
extern bool docker_tar_first_file(const char *tar, size_t len, const char **data, size_t *size,
						   bool *is_file);

/* docker_api.c: exec in a container, and the driver's scripts run that way */
/* POST /containers/{ref}/exec for an argv, as the workspace user */
extern void docker_exec_create_request(const MeshBackend *be, const char *ref, json_t *cmd, json_t *env,
								bool attach, MeshHttpRequest *req);
/* ["sh", "-c", script, "mesh"], for the script's arguments to follow */
extern json_t *docker_script_cmd(const char *script);
/* the exec's id from a create answer, in op->exec_id */
extern bool docker_take_exec_id(const MeshBackend *be, DockerOp *op, const MeshHttpResponse *resp,
						 MeshError *err);
/* POST /exec/{id}/start, attached (the stream) or detached */
extern void docker_exec_start_request(const MeshBackend *be, DockerOp *op, long extra_ms, bool detach,
							   MeshHttpRequest *req);
/* split Docker's multiplexed stream into stdout and stderr */
extern bool docker_demux(const char *buf, size_t len, StringInfo out, StringInfo err);
/* the attached exec create of a driver script with its arguments */
extern void docker_script_request(const MeshBackend *be, DockerOp *op, const char *script,
						   const char *const *args, MeshHttpRequest *req);
/* a script's create, then its start, whose output lands in op->out and op->err */
extern MeshStepResult docker_script_step(const MeshBackend *be, MeshOpState *st, DockerOp *op,
								  const MeshHttpResponse *resp, const char *doing, long extra_ms,
								  MeshError *err);
/* whether a script's create found its container gone or stopped */
extern bool docker_container_absent(const DockerOp *op, const MeshHttpResponse *resp);
/* an exec key names a directory of the scratch volume: a plain name only */
extern bool docker_valid_key(const MeshBackend *be, const char *key, MeshError *err);
/* the first line a script printed (in op->out) */
extern const char *docker_script_verdict(DockerOp *op);

/* docker_exec.c: exec, kill, and background commands' start, output and forget */
extern bool docker_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult docker_exec_response(const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp, MeshExecResult *result,
										   MeshError *err);
extern bool docker_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								const char *exec_key, const char *signal, MeshHttpRequest *req,
								MeshError *err);
extern MeshStepResult docker_kill_response(const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp, MeshError *err);
extern MeshStepResult docker_exec_start_response(const MeshBackend *be, MeshOpState *st,
												 const MeshHttpResponse *resp, MeshError *err);
extern bool docker_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
									   const char *exec_key, const MeshOutputAsk *ask,
									   MeshHttpRequest *req, MeshError *err);
extern MeshStepResult docker_exec_output_response(const MeshBackend *be, MeshOpState *st,
												  const MeshHttpResponse *resp,
												  MeshExecProgress *progress, MeshError *err);
extern bool docker_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
									   const char *exec_key, MeshHttpRequest *req,
									   MeshError *err);
extern MeshStepResult docker_exec_forget_response(const MeshBackend *be, MeshOpState *st,
												  const MeshHttpResponse *resp, MeshError *err);

/* docker_files.c: file read and write */
extern bool docker_read_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								const char *path, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult docker_read_response(const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp, const char **data,
										   size_t *len, MeshError *err);
extern bool docker_write_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								 const char *path, int mode, const char *data, size_t len,
								 MeshHttpRequest *req, MeshError *err);
extern MeshStepResult docker_write_response(const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp, MeshError *err);

#endif							/* MESH_DOCKER_API_H */
