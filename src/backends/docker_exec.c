/*-------------------------------------------------------------------------
 *
 * docker_exec.c
 *	  The docker driver's commands: exec, kill, and background commands'
 *	  start, output and forget.
 *
 * An exec runs under docker_exec_wrapper (docker_background.c), attached,
 * and its answer is the multiplexed stream; stdin travels first as a file
 * through the archive API.  Kill is an exec of docker_kill_script.  A background command is
 * claimed, started detached under docker_bg_wrapper, read and forgotten
 * through the scripts and the reader in docker_background.c (docker.h),
 * which keeps them apart from the server's runtime; this file turns them
 * into Engine API requests, MeshExecProgress and MeshErrors.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

#include "backends/backend.h"
#include "backends/docker_api.h"

/*--------------------------------------------------------------------------
 * Exec
 *--------------------------------------------------------------------------
 */

/* env object -> ["K=V", ...] */
static json_t *
env_array(json_t *env)
{
	json_t	   *list = json_array();
	const char *key;
	json_t	   *value;

	json_object_foreach(env, key, value)
		if (json_is_string(value))
		json_array_append_new(list, json_string(psprintf("%s=%s", key, json_string_value(value))));
	return list;
}

/*
 * The exec create request of the wrapped command, built while the spec is
 * at hand: an ordinary exec's wrapper (attached), or a background
 * command's (detached, no timeout when none is given).
 */
static void
exec_command_request(const MeshBackend *be, DockerOp *op, const MeshExecSpec *spec,
					 MeshHttpRequest *req)
{
	json_t	   *cmd = docker_script_cmd(spec->background ? docker_bg_wrapper : docker_exec_wrapper);

	json_array_append_new(cmd, json_string(op->key));
	if (spec->background && spec->timeout_ms <= 0)
		json_array_append_new(cmd, json_string("0"));
	else
		json_array_append_new(cmd, json_string(psprintf("%ld.%03ld", spec->timeout_ms / 1000,
														spec->timeout_ms % 1000)));
	if (!spec->background)
		json_array_append_new(cmd, json_string(psprintf("%ld", op->kept)));
	json_array_append_new(cmd, json_string(spec->dir && spec->dir[0] ? spec->dir : "."));
	for (int i = 0; i < spec->argc; i++)
		json_array_append_new(cmd, json_string(spec->argv[i]));
	docker_exec_create_request(be, op->ref, cmd, spec->env ? env_array(spec->env) : NULL,
						!spec->background, req);
}

/*
 * PUT the stdin file into the exec's own scratch directory (an ordinary
 * exec's under /run/mesh, a background command's record), owned by the user.
 */
static void
stdin_upload_request(const MeshBackend *be, DockerOp *op, const MeshExecSpec *spec,
					 MeshHttpRequest *req)
{
	StringInfoData tar;

	initStringInfo(&tar);
	docker_tar_header(&tar, psprintf("%s/", op->key), '5', 0700, docker_config_user(be), 0);
	docker_tar_file(&tar, psprintf("%s/in", op->key), 0600, docker_config_user(be),
			 spec->stdin_data, spec->stdin_len);
	docker_tar_end(&tar);
	docker_begin(be, req, "PUT", psprintf("/containers/%s/archive?path=%s",
										  mesh_url_encode(op->ref),
										  spec->background ? DOCKER_BG_DIR : DOCKER_SCRATCH));
	req->body = tar.data;
	req->body_len = tar.len;
	mesh_http_add_header(req, "Content-Type: application/x-tar");
}

/*
 * Stdin first (as a file in the exec's scratch directory), else the
 * command.  A background command claims its key first (background_claimed).
 */
bool
docker_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = docker_op_new(st, ref);

	op->key = pstrdup(spec->exec_key);
	op->timeout_ms = spec->timeout_ms;
	op->kept = spec->max_output_bytes;
	op->started = GetCurrentTimestamp();
	initStringInfo(&op->out);
	initStringInfo(&op->err);
	if (spec->background)
	{
		if (!docker_valid_key(be, op->key, err))
			return false;
		exec_command_request(be, op, spec, &op->create);
		op->has_stdin = spec->stdin_data != NULL;
		if (op->has_stdin)
			stdin_upload_request(be, op, spec, &op->upload);
		docker_script_request(be, op, docker_bg_claim_script, (const char *[]) {op->key, NULL}, req);
		return true;
	}
	if (spec->stdin_data == NULL)
	{
		op->phase = PH_EXEC_CREATE;
		exec_command_request(be, op, spec, req);
		return true;
	}
	op->phase = PH_STDIN;
	exec_command_request(be, op, spec, &op->create);
	stdin_upload_request(be, op, spec, req);
	return true;
}

/* The trailer at the end of stderr: timed out, full stdout/stderr sizes. */
static bool
take_trailer(StringInfo err, bool *timed_out, long long *out_size, long long *err_size)
{
	const char *mark = NULL;
	int			to;

	for (int i = err->len - 1; i >= 0; i--)
		if (err->data[i] == '\036')
		{
			mark = err->data + i;
			break;
		}
	if (mark == NULL || sscanf(mark, "\036mesh:%d:%lld:%lld", &to, out_size, err_size) != 3)
		return false;
	err->len = (int) (mark - err->data);
	err->data[err->len] = '\0';
	*timed_out = to != 0;
	return true;
}

/* The kept tail of a stream, and what the command wrote in all. */
static void
take_stream(StringInfo s, long long full, char **data, size_t *len, int64_t *total,
			bool *truncated)
{
	*data = s->data;
	*len = s->len;
	*total = Max(full, (long long) s->len);
	if (*total > (int64_t) s->len)
		*truncated = true;
}

/* The stream ended: keep both outputs, then ask for the exit code. */
static MeshStepResult
exec_streamed(const MeshBackend *be, MeshOpState *st, DockerOp *op, const MeshHttpResponse *resp,
			  MeshError *err)
{
	if (!docker_ok(resp, be, "run the command", err))
		return MESH_STEP_FAILED;
	if (!docker_demux(resp->body, resp->body_len, &op->out, &op->err))
	{
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) answered an exec with a malformed output stream", be->name);
		return MESH_STEP_FAILED;
	}
	op->phase = PH_EXEC_INSPECT;
	docker_begin(be, &st->next, "GET", psprintf("/exec/%s/json", op->exec_id));
	return MESH_STEP_NEXT;
}

/* Exit code from the inspect; the rest from the wrapper's trailer. */
static MeshStepResult
exec_finished(const MeshBackend *be, DockerOp *op, const MeshHttpResponse *resp,
			  MeshExecResult *result, MeshError *err)
{
	json_t	   *doc;
	json_t	   *code;
	long long	out_size = 0;
	long long	err_size = 0;
	bool		complete;

	if (!docker_ok(resp, be, "inspect the finished command", err) ||
		(doc = docker_parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	code = json_object_get(doc, "ExitCode");
	if (!json_is_integer(code) || json_is_true(json_object_get(doc, "Running")))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) reported no exit code for a finished command", be->name);
		return MESH_STEP_FAILED;
	}
	memset(result, 0, sizeof(*result));
	result->exit_code = (int) json_integer_value(code);
	json_decref(doc);
	complete = take_trailer(&op->err, &result->timed_out, &out_size, &err_size);
	/* no trailer: the wrapper itself was killed (a cancel, or the container stopped) */
	result->killed = !complete;
	take_stream(&op->out, complete ? out_size : op->out.len,
				&result->stdout_data, &result->stdout_len, &result->stdout_total, &result->truncated);
	take_stream(&op->err, complete ? err_size : op->err.len,
				&result->stderr_data, &result->stderr_len, &result->stderr_total, &result->truncated);
	result->wall_seconds = (double) (GetCurrentTimestamp() - op->started) / 1000000.0;
	result->cpu_metered = false;
	return MESH_STEP_DONE;
}

/* stdin upload -> exec create -> start (stream) -> inspect (exit code). */
MeshStepResult
docker_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshExecResult *result, MeshError *err)
{
	DockerOp   *op = st->data;

	switch (op->phase)
	{
		case PH_STDIN:
			if (!docker_ok(resp, be, "deliver stdin", err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_CREATE;
			st->next = op->create;
			return MESH_STEP_NEXT;
		case PH_EXEC_CREATE:
			if (!docker_ok(resp, be, "create an exec", err) || !docker_take_exec_id(be, op, resp, err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_START;
			/* the transport must outlast the command's own timeout */
			docker_exec_start_request(be, op, op->timeout_ms + 10000, false, &st->next);
			return MESH_STEP_NEXT;
		case PH_EXEC_START:
			return exec_streamed(be, st, op, resp, err);
		default:
			return exec_finished(be, op, resp, result, err);
	}
}

/*--------------------------------------------------------------------------
 * Kill: an exec that kills the recorded process group
 *--------------------------------------------------------------------------
 */

/* SIGNAL (NULL: KILL) to the exec's process group, background or not. */
bool
docker_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					const char *exec_key, const char *signal, MeshHttpRequest *req,
					MeshError *err)
{
	DockerOp   *op = docker_op_new(st, ref);

	if (signal == NULL)
		signal = "KILL";
	if (!docker_valid_key(be, exec_key, err))
		return false;
	if (!docker_signal_valid(signal))
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": cannot send signal \"%s\" (TERM, INT, HUP, QUIT, USR1, USR2 or KILL)",
					   be->name, signal);
		return false;
	}
	docker_script_request(be, op, docker_kill_script, (const char *[]) {exec_key, signal, NULL}, req);
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/* A container that is gone or stopped has nothing left to kill. */
MeshStepResult
docker_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;

	if (docker_container_absent(op, resp))
		return MESH_STEP_DONE;
	step = docker_script_step(be, st, op, resp, "kill the command", 0, err);
	if (step == MESH_STEP_NEXT)
		st->next.timeout_ms = Min(st->next.timeout_ms, 10000);
	return step;
}

/*--------------------------------------------------------------------------
 * Background commands: claim, [stdin], detached wrapper; output; forget
 *--------------------------------------------------------------------------
 */

/* The claim's verdict: on to stdin or the wrapper, or the key is taken. */
static MeshStepResult
background_claimed(const MeshBackend *be, MeshOpState *st, DockerOp *op, MeshError *err)
{
	const char *verdict = docker_script_verdict(op);

	if (strcmp(verdict, "claimed") == 0)
	{
		op->phase = op->has_stdin ? PH_STDIN : PH_LAUNCH;
		st->next = op->has_stdin ? op->upload : op->create;
		return MESH_STEP_NEXT;
	}
	if (strcmp(verdict, "used") == 0)
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": exec key \"%s\" is already used in this workspace",
					   be->name, op->key);
	else
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) could not record a background command in " DOCKER_BG_DIR ": \"%s\"%s%s",
					   be->name, verdict, op->err.len ? ": " : "", op->err.data);
	return MESH_STEP_FAILED;
}

/* Docker's word that the wrapper's process started (running, or already ended). */
static MeshStepResult
background_started(const MeshBackend *be, const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;
	bool		started;

	if (!docker_ok(resp, be, "inspect the background command", err) ||
		(doc = docker_parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	started = json_is_true(json_object_get(doc, "Running")) ||
		json_is_integer(json_object_get(doc, "ExitCode"));
	json_decref(doc);
	if (started)
		return MESH_STEP_DONE;
	mesh_error_set(err, MESH_FAIL_PROTOCOL,
				   "backend \"%s\" (Docker) accepted a background command but reports it neither running nor ended",
				   be->name);
	return MESH_STEP_FAILED;
}

/*
 * claim (create, start: "claimed" or "used") -> [stdin upload] -> wrapper
 * create -> detached start -> exec inspect.  The claim makes the record
 * before anything can be written into it, so a key in use is refused
 * before its stdin could be touched.
 */
MeshStepResult
docker_exec_start_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						   MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;

	switch (op->phase)
	{
		case PH_EXEC_CREATE:
		case PH_EXEC_START:
			step = docker_script_step(be, st, op, resp, "record a background command", 0, err);
			return step == MESH_STEP_DONE ? background_claimed(be, st, op, err) : step;
		case PH_STDIN:
			if (!docker_ok(resp, be, "deliver stdin", err))
				return MESH_STEP_FAILED;
			op->phase = PH_LAUNCH;
			st->next = op->create;
			return MESH_STEP_NEXT;
		case PH_LAUNCH:
			if (!docker_ok(resp, be, "create the background command's exec", err) ||
				!docker_take_exec_id(be, op, resp, err))
				return MESH_STEP_FAILED;
			op->phase = PH_LAUNCH_START;
			docker_exec_start_request(be, op, 0, true, &st->next);
			return MESH_STEP_NEXT;
		case PH_LAUNCH_START:
			if (!docker_ok(resp, be, "start the background command", err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_INSPECT;
			docker_begin(be, &st->next, "GET", psprintf("/exec/%s/json", op->exec_id));
			return MESH_STEP_NEXT;
		default:
			return background_started(be, resp, err);
	}
}

/*
 * One exec of the output script (docker_background.c), attached: it waits
 * in the container up to wait_ms, so its start may take that much longer.
 * The spool keeps the bytes before ask->*_kept (docs/backends.md): it lives
 * in the container's scratch volume, on the engine's storage like the
 * workspace's own files.
 */
bool
docker_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						   const char *exec_key, const MeshOutputAsk *ask,
						   MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = docker_op_new(st, ref);
	long		looks;

	if (!docker_valid_key(be, exec_key, err))
		return false;
	if (ask->stdout_from < 0 || ask->stderr_from < 0)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": output offsets must not be negative", be->name);
		return false;
	}
	op->key = pstrdup(exec_key);
	op->wait_ms = Max(ask->wait_ms, 0);
	looks = (op->wait_ms + DOCKER_BG_POLL_MS - 1) / DOCKER_BG_POLL_MS;
	docker_script_request(be, op, docker_bg_output_script,
				   (const char *[]) {exec_key,
					   psprintf(INT64_FORMAT, ask->stdout_from),
					   psprintf(INT64_FORMAT, ask->stderr_from),
					   psprintf("%ld", looks),
					   psprintf("%zu", Min(ask->max_bytes, (size_t) PG_INT64_MAX)),
				   NULL}, req);
	return true;
}

/* What the reader found, as the contract's progress (or why there is none). */
static MeshStepResult
background_progress(const MeshBackend *be, DockerOp *op, MeshExecProgress *progress,
					MeshError *err)
{
	DockerBgOutput found;

	if (!docker_bg_output_parse(op->out.data, op->out.len, &found))
	{
		/* nothing at all: the script was killed with its container (stopped meanwhile) */
		mesh_error_set(err, op->out.len == 0 ? MESH_FAIL_NOT_RUNNING : MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) answered an output call for exec \"%s\" with %s%s%s",
					   be->name, op->key,
					   op->out.len == 0 ? "nothing (its container stopped?)" : "an unreadable record",
					   op->err.len ? ": " : "", op->err.data);
		return MESH_STEP_FAILED;
	}
	if (found.state == DOCKER_BG_MISSING || found.state == DOCKER_BG_LOST)
	{
		mesh_error_set(err, MESH_FAIL_NOT_FOUND,
					   found.state == DOCKER_BG_MISSING ?
					   "backend \"%s\": no background command \"%s\" in this workspace" :
					   "backend \"%s\": background command \"%s\" is gone without an end (its container was stopped or restarted)",
					   be->name, op->key);
		return MESH_STEP_FAILED;
	}
	memset(progress, 0, sizeof(*progress));
	progress->stdout_data = found.out_data;
	progress->stdout_len = found.out_len;
	progress->stdout_from = found.out_from;
	progress->stderr_data = found.err_data;
	progress->stderr_len = found.err_len;
	progress->stderr_from = found.err_from;
	progress->ended = docker_bg_output_reaches_end(&found);
	if (progress->ended)
	{
		progress->result.exit_code = found.exit_code;
		progress->result.timed_out = found.timed_out;
		progress->result.killed = found.killed;
		progress->result.stdout_total = found.out_total;
		progress->result.stderr_total = found.err_total;
		progress->result.wall_seconds = found.wall_seconds;
	}
	return MESH_STEP_DONE;
}

/* A container that is gone has no record; a stopped one cannot be read now. */
MeshStepResult
docker_exec_output_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
							MeshExecProgress *progress, MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step = docker_script_step(be, st, op, resp, "read a background command's output",
									  op->wait_ms, err);

	return step == MESH_STEP_DONE ? background_progress(be, op, progress, err) : step;
}

/* One exec of the forget script: the record goes unless its command still runs. */
bool
docker_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						   const char *exec_key, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = docker_op_new(st, ref);

	if (!docker_valid_key(be, exec_key, err))
		return false;
	op->key = pstrdup(exec_key);
	docker_script_request(be, op, docker_bg_forget_script, (const char *[]) {exec_key, NULL}, req);
	return true;
}

/*
 * "gone": removed, or never there.  A container that is gone took the
 * record with it; a stopped one keeps it in its scratch volume until it is
 * removed (its wrapper is dead, so a later forget removes it).
 */
MeshStepResult
docker_exec_forget_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
							MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;
	const char *verdict;

	if (docker_container_absent(op, resp))
		return MESH_STEP_DONE;
	step = docker_script_step(be, st, op, resp, "forget a background command", 0, err);
	if (step != MESH_STEP_DONE)
		return step;
	verdict = docker_script_verdict(op);
	if (strcmp(verdict, "gone") == 0)
		return MESH_STEP_DONE;
	mesh_error_set(err, strcmp(verdict, "running") == 0 ? MESH_FAIL_BAD_REQUEST : MESH_FAIL_PROTOCOL,
				   strcmp(verdict, "running") == 0 ?
				   "backend \"%s\": background command \"%s\" is still running; kill it first" :
				   "backend \"%s\" (Docker) could not remove the record of background command \"%s\"%s%s",
				   be->name, op->key, op->err.len ? ": " : "", op->err.data);
	return MESH_STEP_FAILED;
}
