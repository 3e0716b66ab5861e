/*-------------------------------------------------------------------------
 *
 * sandboxd.c
 *	  Driver for mesh-sandboxd, speaking docs/protocol.md (version 1).
 *
 * Config (mesh.backends.config):
 *	  {"socket": "/path/to/sandboxd.sock"}	unix socket, file permission auth
 *	  {"url": "http://127.0.0.1:7070"}		TCP, needs a credential (bearer)
 *	  {"embedded": true}					the daemon the extension supervises
 *	  optional: "release": "destroy" | "hibernate", "request_timeout_ms"
 *
 * Pure request builders and response parsers: no I/O happens here.  The
 * framed answers (an exec's output "tail", a background exec's output) are
 * read by sandboxd_parse.c, which the fuzzer drives.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "lib/stringinfo.h"

#include "backends/backend.h"
#include "backends/sandboxd_parse.h"

#define SANDBOXD_EMBEDDED_SOCKET "mesh_sandboxd/sandboxd.sock"
#define SANDBOXD_DEFAULT_REQUEST_TIMEOUT_MS 60000

static const char *
sandboxd_validate_config(json_t *config)
{
	json_t	   *socket = json_object_get(config, "socket");
	json_t	   *url = json_object_get(config, "url");
	json_t	   *embedded = json_object_get(config, "embedded");
	json_t	   *release = json_object_get(config, "release");
	json_t	   *timeout = json_object_get(config, "request_timeout_ms");
	json_t	   *egress = json_object_get(config, "egress_control");
	json_t	   *snapshot = json_object_get(config, "snapshot");
	const char *key;
	json_t	   *value;
	int			endpoints = (socket != NULL) + (url != NULL) + (embedded != NULL);

	json_object_foreach(config, key, value)
	{
		if (strcmp(key, "socket") != 0 && strcmp(key, "url") != 0 &&
			strcmp(key, "embedded") != 0 && strcmp(key, "release") != 0 &&
			strcmp(key, "request_timeout_ms") != 0 && strcmp(key, "egress_control") != 0 &&
			strcmp(key, "snapshot") != 0)
			return psprintf("%s: unknown field (expected socket, url, embedded, release, request_timeout_ms, egress_control, snapshot)", key);
	}
	if (endpoints != 1)
		return "socket/url/embedded: exactly one of them must be given";
	if (socket && (!json_is_string(socket) || json_string_value(socket)[0] != '/'))
		return "socket: must be an absolute path";
	if (url && (!json_is_string(url) ||
				(strncmp(json_string_value(url), "http://", 7) != 0 &&
				 strncmp(json_string_value(url), "https://", 8) != 0)))
		return "url: must start with http:// or https://";
	if (url && strchr(json_string_value(url) + 8, '@'))
		return "url: must not carry credentials; set them with mesh.backend_set_credential";
	if (embedded && !json_is_true(embedded))
		return "embedded: must be true when given";
	if (release && (!json_is_string(release) ||
					(strcmp(json_string_value(release), "destroy") != 0 &&
					 strcmp(json_string_value(release), "hibernate") != 0)))
		return "release: must be \"destroy\" or \"hibernate\"";
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 100))
		return "request_timeout_ms: must be an integer of at least 100";
	if (egress && !json_is_boolean(egress))
		return "egress_control: must be true or false";
	if (snapshot && !json_is_boolean(snapshot))
		return "snapshot: must be true or false";
	return NULL;
}

static bool
sandboxd_needs_credential(json_t *config)
{
	return json_object_get(config, "url") != NULL;
}

/*
 * Snapshots are declared unless the config says "snapshot": false: a daemon
 * on a kernel without unprivileged overlay layers by descriptor (before 6.13)
 * reports snapshot false, and its backend entry must say so, since the
 * decision to stand on a snapshot is made before the daemon is asked (a
 * wrong declaration fails closed: such a daemon refuses the acquire).
 */
static bool
snapshot_declared(const MeshBackend *be)
{
	json_t	   *snapshot = be->config ? json_object_get(be->config, "snapshot") : NULL;

	return snapshot == NULL || json_is_true(snapshot);
}

/*
 * What the protocol promises everywhere; acquire refines it from the host.
 * egress_control is declared (the network policy is decided before the
 * daemon is asked): daemons of this protocol enforce it, and a daemon that
 * cannot refuses network "open"/"allowlist" with egress_unsupported, so a
 * wrong declaration fails closed.  Config "egress_control": false declares
 * an older or incapable daemon.
 */
static void
sandboxd_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	json_t	   *egress = be->config ? json_object_get(be->config, "egress_control") : NULL;

	memset(caps, 0, sizeof(*caps));
	caps->shell = true;
	caps->hibernate = true;
	caps->caller_chosen_id = true;
	caps->egress_control = egress == NULL || json_is_true(egress);
	caps->snapshot = snapshot_declared(be);
	caps->background = true;
	caps->extend_timeout = true;
}

/* Start a request: endpoint, auth and deadline common to every call. */
static void
sandboxd_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method,
			   const char *path)
{
	json_t	   *url = json_object_get(be->config, "url");
	json_t	   *socket = json_object_get(be->config, "socket");
	json_t	   *timeout = json_object_get(be->config, "request_timeout_ms");

	memset(req, 0, sizeof(*req));
	req->method = method;
	if (url)
	{
		const char *base = json_string_value(url);
		size_t		len = strlen(base);

		req->url = psprintf("%.*s%s", (int) (len > 0 && base[len - 1] == '/' ? len - 1 : len),
							base, path);
	}
	else
	{
		req->url = psprintf("http://localhost%s", path);
		req->unix_socket = socket ? pstrdup(json_string_value(socket))
			: psprintf("%s/%s", be->data_dir, SANDBOXD_EMBEDDED_SOCKET);
	}
	if (be->credential)
		mesh_http_add_header(req, "Authorization: Bearer %s", be->credential);
	req->timeout_ms = timeout ? (long) json_integer_value(timeout)
		: SANDBOXD_DEFAULT_REQUEST_TIMEOUT_MS;
}

static json_t *
parse_body(const MeshHttpResponse *resp, const MeshBackend *be, MeshError *err)
{
	json_t	   *doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);

	if (doc == NULL || !json_is_object(doc))
	{
		if (doc)
			json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered with a body that is not a JSON object", be->name);
		return NULL;
	}
	return doc;
}

/*
 * The acquire body's network fields from the workspace's captured policy:
 * "allowlist" with its domains, "open" when the policy is open and enforced
 * here, else "none" (loopback only: no policy recorded, or a daemon
 * declared without egress_control).
 */
static void
set_network(json_t *body, const char *egress_text)
{
	json_t	   *egress = egress_text ? json_loads(egress_text, 0, NULL) : NULL;
	const char *mode = egress ? json_string_value(json_object_get(egress, "mode")) : NULL;
	bool		enforced = egress && json_is_true(json_object_get(egress, "enforced"));

	if (mode && strcmp(mode, "allowlist") == 0)
	{
		json_t	   *domains = json_object_get(egress, "domains");

		json_object_set_new(body, "network", json_string("allowlist"));
		json_object_set_new(body, "allow", json_is_array(domains) ? json_incref(domains) : json_array());
	}
	else if (mode && strcmp(mode, "open") == 0 && enforced)
		json_object_set_new(body, "network", json_string("open"));
	else
		json_object_set_new(body, "network", json_string("none"));
	if (egress)
		json_decref(egress);
}

static bool
sandboxd_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						 const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	json_t	   *body = json_pack("{s:s,s:{s:s}}", "size", mesh_size_name(spec->size),
								 "labels", "mesh.install", spec->install_id);

	sandboxd_begin(be, req, "PUT", psprintf("/v1/workspaces/%s", ref));
	set_network(body, spec->egress);
	if (spec->snapshot)
		json_object_set_new(body, "snapshot", json_string(spec->snapshot));
	mesh_http_json_body(req, body);
	return true;
}

/* Take what the host says it enforces, where it says anything. */
static void
refine_capabilities(json_t *reported, MeshCapabilities *caps)
{
	if (!json_is_object(reported))
	{
		caps->background = false;
		caps->extend_timeout = false;
		return;
	}
#define REFINE(field) \
	if (json_is_boolean(json_object_get(reported, #field))) \
		caps->field = json_is_true(json_object_get(reported, #field))
	REFINE(shell);
	REFINE(resource_limits);
	REFINE(compute_metering);
	REFINE(egress_control);
	REFINE(disk_limits);
	REFINE(disk_quota);
	REFINE(snapshot);
	REFINE(hibernate);
	REFINE(caller_chosen_id);
	REFINE(seccomp);
#undef REFINE
	/* a daemon that does not say it runs background execs predates them */
	caps->background = json_is_true(json_object_get(reported, "background"));
	/* nor one that does not say it moves a running exec's deadline */
	caps->extend_timeout = json_is_true(json_object_get(reported, "extend_timeout"));
}

/* The host reports what it enforces at acquisition; record that. */
static MeshStepResult
sandboxd_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						  MeshCapabilities *caps, MeshError *err)
{
	json_t	   *doc;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	doc = parse_body(resp, be, err);
	if (doc == NULL)
		return MESH_STEP_FAILED;
	sandboxd_declared_capabilities(be, caps);
	refine_capabilities(json_object_get(doc, "capabilities"), caps);
	/* a backend declared without snapshots never stands a run on one: keep it so */
	caps->snapshot = caps->snapshot && snapshot_declared(be);
	/* a daemon without egress_control either refused or was sent "none" */
	json_decref(doc);
	return MESH_STEP_DONE;
}

static bool
sandboxd_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					  const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	json_t	   *body = json_object();
	json_t	   *argv = json_array();

	sandboxd_begin(be, req, "POST", psprintf("/v1/workspaces/%s/exec", ref));
	for (int i = 0; i < spec->argc; i++)
		json_array_append_new(argv, json_string(spec->argv[i]));
	json_object_set_new(body, "argv", argv);
	if (spec->dir)
		json_object_set_new(body, "dir", json_string(spec->dir));
	if (spec->env)
		json_object_set(body, "env", spec->env);
	json_object_set_new(body, "timeout_ms", json_integer(spec->timeout_ms));
	json_object_set_new(body, "exec_key", json_string(spec->exec_key));
	json_object_set_new(body, "max_output_bytes", json_integer(spec->max_output_bytes));
	json_object_set_new(body, "output", json_string("tail"));
	if (spec->background)
		json_object_set_new(body, "background", json_true());
	/* stdin is encoded once, into the body itself */
	if (spec->stdin_data)
		mesh_http_json_body_b64(req, body, "stdin_b64", spec->stdin_data, spec->stdin_len);
	else
		mesh_http_json_body(req, body);
	/* the transport deadline must outlast the command's own timeout (a background
	 * exec answers once the command started) */
	if (!spec->background)
		req->timeout_ms += spec->timeout_ms;
	return true;
}

static bool
decode_stream(json_t *doc, const char *field, char **data, size_t *len)
{
	json_t	   *value = json_object_get(doc, field);

	if (value == NULL || json_is_null(value))
	{
		*data = pstrdup("");
		*len = 0;
		return true;
	}
	return json_is_string(value) && mesh_base64_decode(json_string_value(value), data, len);
}

/*
 * Both streams of an exec answer: the raw bytes after the document, where
 * the daemon put them (output "tail", what this driver asks for; the result
 * points into the response body, which must outlive it), or base64 inside
 * the document from a daemon that answers the older way.
 */
static bool
exec_streams(const SandboxdFrame *frame, MeshExecResult *result)
{
	if (!frame->raw)
		return decode_stream(frame->doc, "stdout_b64", &result->stdout_data, &result->stdout_len) &&
			decode_stream(frame->doc, "stderr_b64", &result->stderr_data, &result->stderr_len);
	result->stdout_data = (char *) frame->stdout_data;
	result->stdout_len = frame->stdout_len;
	result->stderr_data = (char *) frame->stderr_data;
	result->stderr_len = frame->stderr_len;
	return true;
}

/* Bytes the command wrote to a stream: never fewer than the daemon kept. */
static int64_t
stream_total(json_t *doc, const char *field, size_t kept)
{
	json_t	   *value = json_object_get(doc, field);

	if (!json_is_integer(value) || json_integer_value(value) < (json_int_t) kept)
		return (int64_t) kept;
	return (int64_t) json_integer_value(value);
}

/*
 * The daemon's egress_denials, kept as JSON text for the events: only
 * well-formed entries, only the four documented fields.  NULL when none.
 */
static char *
parse_denials(json_t *list)
{
	json_t	   *out;
	json_t	   *d;
	size_t		i;
	char	   *text;
	char	   *result;

	if (!json_is_array(list) || json_array_size(list) == 0)
		return NULL;
	out = json_array();
	json_array_foreach(list, i, d)
	{
		if (!json_is_string(json_object_get(d, "host")) ||
			!json_is_integer(json_object_get(d, "port")) ||
			!json_is_string(json_object_get(d, "reason")))
			continue;
		json_array_append_new(out, json_pack("{s:O,s:O,s:O,s:o}",
											 "host", json_object_get(d, "host"),
											 "port", json_object_get(d, "port"),
											 "reason", json_object_get(d, "reason"),
											 "at", json_is_string(json_object_get(d, "at"))
											 ? json_incref(json_object_get(d, "at")) : json_null()));
	}
	text = json_array_size(out) ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (text == NULL)
		return NULL;
	result = pstrdup(text);
	free(text);
	return result;
}

/*
 * A command the kernel refused to start because its arguments and
 * environment were too large did not run: that is an error of the call, not
 * a command that exited 127.  (A missing or non-executable program keeps the
 * exit status 127 every backend gives it.)
 */
static bool
spawn_refused(json_t *doc, MeshError *err)
{
	json_t	   *spawn = json_object_get(doc, "spawn_error");
	const char *code = json_string_value(json_object_get(spawn, "code"));
	const char *message = json_string_value(json_object_get(spawn, "message"));

	if (code == NULL || strcmp(code, "argument_list_too_long") != 0)
		return false;
	mesh_error_set(err, MESH_FAIL_ARGS_TOO_LONG, "%s", message ? message : "argument list too long");
	return true;
}

/*
 * The end of an exec from the daemon's document: exit status, flags (the
 * disk quota's among them), metering, peak memory, egress denials, and the totals (at least the kept
 * lengths already in RESULT).  The one reader of end fields, for a
 * foreground exec's answer and a background exec's last output alike.
 * False when the document has no exit code.
 */
static bool
exec_result_from_doc(json_t *doc, MeshExecResult *result)
{
	json_t	   *cpu = json_object_get(doc, "cpu_ms");
	json_t	   *peak = json_object_get(doc, "memory_peak_bytes");

	if (!json_is_integer(json_object_get(doc, "exit_code")))
		return false;
	result->exit_code = (int) json_integer_value(json_object_get(doc, "exit_code"));
	result->stdout_total = stream_total(doc, "stdout_bytes", result->stdout_len);
	result->stderr_total = stream_total(doc, "stderr_bytes", result->stderr_len);
	result->truncated = json_is_true(json_object_get(doc, "truncated"));
	result->timed_out = json_is_true(json_object_get(doc, "timed_out"));
	result->oom_killed = json_is_true(json_object_get(doc, "oom_killed"));
	result->killed = json_is_true(json_object_get(doc, "killed"));
	result->disk_quota = json_is_true(json_object_get(doc, "disk_quota"));
	result->wall_seconds = json_number_value(json_object_get(doc, "wall_ms")) / 1000.0;
	result->cpu_metered = json_is_number(cpu);
	result->cpu_seconds = result->cpu_metered ? json_number_value(cpu) / 1000.0 : 0;
	/* null or absent where the host has no memory controller */
	result->memory_peak_known = json_is_integer(peak) && json_integer_value(peak) >= 0;
	result->memory_peak_bytes = result->memory_peak_known ? json_integer_value(peak) : 0;
	result->egress_denials = parse_denials(json_object_get(doc, "egress_denials"));
	return true;
}

static MeshStepResult
sandboxd_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   MeshExecResult *result, MeshError *err)
{
	SandboxdFrame frame;
	bool		ok;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	if (!sandboxd_frame_read(resp->body, resp->body_len, &frame))
	{
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered an exec with a body that is not a JSON object followed by the output it announced",
					   be->name);
		return MESH_STEP_FAILED;
	}
	if (spawn_refused(frame.doc, err))
	{
		json_decref(frame.doc);
		return MESH_STEP_FAILED;
	}
	memset(result, 0, sizeof(*result));
	ok = exec_streams(&frame, result) && exec_result_from_doc(frame.doc, result);
	json_decref(frame.doc);
	if (!ok)
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered an exec without exit_code, or with output not as its answer announced it",
					   be->name);
	return mesh_step(ok);
}

/* The daemon took a background exec: 202, nothing else (an older daemon would have run it
 * in the foreground and answered 200 at its end). */
static MeshStepResult
sandboxd_exec_start_response(const MeshBackend *be, MeshOpState *st,
							 const MeshHttpResponse *resp, MeshError *err)
{
	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	if (resp->status == 202)
		return MESH_STEP_DONE;
	mesh_error_set(err, MESH_FAIL_PROTOCOL,
				   "backend \"%s\" answered a background exec with HTTP %ld instead of 202 (a daemon without background execs?)",
				   be->name, resp->status);
	return MESH_STEP_FAILED;
}

/* How long past its wait_ms a GET of output may take on the wire. */
#define SANDBOXD_OUTPUT_MARGIN_MS 10000

/* The bytes before the *_kept offsets are the caller's for good: the daemon drops them. */
static bool
sandboxd_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							 const char *exec_key, const MeshOutputAsk *ask,
							 MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "GET",
				   psprintf("/v1/workspaces/%s/execs/%s/output?stdout_from=%lld&stderr_from=%lld&stdout_ack=%lld&stderr_ack=%lld&wait_ms=%ld&max_bytes=%zu",
							ref, mesh_url_encode(exec_key), (long long) ask->stdout_from,
							(long long) ask->stderr_from, (long long) ask->stdout_kept,
							(long long) ask->stderr_kept, ask->wait_ms, ask->max_bytes));
	req->timeout_ms = Max(req->timeout_ms, ask->wait_ms + SANDBOXD_OUTPUT_MARGIN_MS);
	return true;
}

/*
 * A background exec's output from the offsets asked for.  The bytes point
 * into the response body.  An end the daemon could not carry (the sandbox
 * went away under it, the agent broke off) fails the operation with the
 * daemon's message, and so does a command the kernel refused to start, as
 * for a foreground exec.
 */
static MeshStepResult
sandboxd_exec_output_response(const MeshBackend *be, MeshOpState *st,
							  const MeshHttpResponse *resp, MeshExecProgress *progress,
							  MeshError *err)
{
	SandboxdFrame frame;
	SandboxdProgress p;
	bool		ok;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	if (!sandboxd_frame_read(resp->body, resp->body_len, &frame) ||
		!sandboxd_progress_read(&frame, &p))
	{
		if (frame.doc)
			json_decref(frame.doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered a background exec's output not framed as the protocol says",
					   be->name);
		return MESH_STEP_FAILED;
	}
	if (p.error_code)
	{
		mesh_error_set(err, strcmp(p.error_code, "workspace_not_running") == 0
					   ? MESH_FAIL_NOT_RUNNING : MESH_FAIL_PROTOCOL,
					   "backend \"%s\" could not carry the background exec to its end: %s%s%s",
					   be->name, p.error_code, p.error_message[0] ? ": " : "", p.error_message);
		err->reason = pstrdup(p.error_message[0] ? p.error_message : p.error_code);
		json_decref(frame.doc);
		return MESH_STEP_FAILED;
	}
	if (!p.running && spawn_refused(frame.doc, err))
	{
		json_decref(frame.doc);
		return MESH_STEP_FAILED;
	}
	memset(progress, 0, sizeof(*progress));
	progress->stdout_data = frame.stdout_data;
	progress->stdout_len = frame.stdout_len;
	progress->stdout_from = p.stdout_from;
	progress->stderr_data = frame.stderr_data;
	progress->stderr_len = frame.stderr_len;
	progress->stderr_from = p.stderr_from;
	progress->ended = !p.running &&
		p.stdout_from + (int64_t) frame.stdout_len == p.stdout_total &&
		p.stderr_from + (int64_t) frame.stderr_len == p.stderr_total;
	ok = p.running || exec_result_from_doc(frame.doc, &progress->result);
	json_decref(frame.doc);
	if (!ok)
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered a background exec's end without exit_code",
					   be->name);
	return mesh_step(ok);
}

static bool
sandboxd_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							 const char *exec_key, MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "DELETE",
				   psprintf("/v1/workspaces/%s/execs/%s", ref, mesh_url_encode(exec_key)));
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/* The answer to a delete: what is already gone (404) counts as deleted. */
static MeshStepResult
deleted_or_gone(const MeshBackend *be, const MeshHttpResponse *resp, MeshError *err)
{
	if (resp->transport_error == NULL && resp->status == 404)
		return MESH_STEP_DONE;
	return mesh_step(mesh_http_error_from_json(resp, be->name, err));
}

/* A record that is already gone (released, expired, a restarted daemon) is forgotten. */
static MeshStepResult
sandboxd_exec_forget_response(const MeshBackend *be, MeshOpState *st,
							  const MeshHttpResponse *resp, MeshError *err)
{
	return deleted_or_gone(be, resp, err);
}

static bool
sandboxd_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					  const char *exec_key, const char *signal, MeshHttpRequest *req,
					  MeshError *err)
{
	sandboxd_begin(be, req, "POST",
				   psprintf("/v1/workspaces/%s/execs/%s/kill", ref, mesh_url_encode(exec_key)));
	if (signal)
		mesh_http_json_body(req, json_pack("{s:s}", "signal", signal));
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/* An exec that already ended (exec_not_found) needs no kill: success too. */
static MeshStepResult
sandboxd_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   MeshError *err)
{
	MeshError	answer = {0};

	if (mesh_http_error_from_json(resp, be->name, &answer))
		return MESH_STEP_DONE;
	/* the daemon's own error code, decoded, not a word found somewhere in the body */
	if (resp->status == 404 && answer.code && strcmp(answer.code, "exec_not_found") == 0)
		return MESH_STEP_DONE;
	*err = answer;
	return MESH_STEP_FAILED;
}

static bool
sandboxd_extend_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const char *exec_key, int64_t by_ms, MeshHttpRequest *req,
						MeshError *err)
{
	sandboxd_begin(be, req, "POST",
				   psprintf("/v1/workspaces/%s/execs/%s/extend", ref, mesh_url_encode(exec_key)));
	mesh_http_json_body(req, json_pack("{s:I}", "by_ms", (json_int_t) by_ms));
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/*
 * The daemon's word: the exec's whole timeout now; an exec it does not run
 * (exec_not_found) or already ends (exec_ended) is MESH_FAIL_NOT_FOUND.
 */
static MeshStepResult
sandboxd_extend_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 int64_t *timeout_ms, MeshError *err)
{
	MeshError	answer = {0};
	json_t	   *doc;
	json_t	   *total;

	*timeout_ms = -1;
	if (!mesh_http_error_from_json(resp, be->name, &answer))
	{
		*err = answer;
		if (answer.code && (strcmp(answer.code, "exec_not_found") == 0 ||
							strcmp(answer.code, "exec_ended") == 0))
			err->failure = MESH_FAIL_NOT_FOUND;
		return MESH_STEP_FAILED;
	}
	doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
	total = doc ? json_object_get(doc, "timeout_ms") : NULL;
	if (json_is_integer(total))
		*timeout_ms = (int64_t) json_integer_value(total);
	if (doc)
		json_decref(doc);
	return MESH_STEP_DONE;
}

static bool
sandboxd_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					  MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "GET",
				   psprintf("/v1/workspaces/%s/files?path=%s", ref, mesh_url_encode(path)));
	return true;
}

/* The body is the file: nothing to parse beyond the status. */
static MeshStepResult
sandboxd_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   const char **data, size_t *len, MeshError *err)
{
	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	*data = resp->body;
	*len = resp->body_len;
	return MESH_STEP_DONE;
}

static bool
sandboxd_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					   int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "PUT",
				   psprintf("/v1/workspaces/%s/files?path=%s&mode=%d", ref, mesh_url_encode(path), mode));
	req->body = data;
	req->body_len = len;
	mesh_http_add_header(req, "Content-Type: application/octet-stream");
	return true;
}

static MeshStepResult
sandboxd_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshError *err)
{
	return mesh_step(mesh_http_error_from_json(resp, be->name, err));
}

static bool
sandboxd_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						 bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	json_t	   *release = json_object_get(be->config, "release");

	sandboxd_begin(be, req, "DELETE", psprintf("/v1/workspaces/%s", ref));
	if (prefer_hibernate)
		mesh_http_json_body(req, json_pack("{s:s}", "prefer", "hibernate"));
	else if (release)
		mesh_http_json_body(req, json_pack("{s:s}", "prefer", json_string_value(release)));
	return true;
}

static MeshStepResult
sandboxd_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						  MeshReleaseOutcome *outcome, MeshError *err)
{
	json_t	   *doc;
	const char *text = NULL;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	doc = parse_body(resp, be, err);
	if (doc == NULL)
		return MESH_STEP_FAILED;
	json_unpack(doc, "{s?s}", "outcome", &text);
	if (text && strcmp(text, "hibernated") == 0)
		*outcome = MESH_RELEASE_HIBERNATED;
	else if (text && strcmp(text, "destroyed") == 0)
		*outcome = MESH_RELEASE_DESTROYED;
	else
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered a release without a known outcome", be->name);
		return MESH_STEP_FAILED;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

static bool
sandboxd_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
					  MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "GET",
				   psprintf("/v1/workspaces?label=%s", mesh_url_encode(psprintf("mesh.install=%s", install_id))));
	return true;
}

/*
 * The array FIELD of a list call's answer, in *DOC (the caller decrefs it);
 * NULL with ERR when the answer is an error or has no such array.
 */
static json_t *
listed_array(const MeshBackend *be, const MeshHttpResponse *resp, const char *field,
			 json_t **doc, MeshError *err)
{
	json_t	   *list;

	if (!mesh_http_error_from_json(resp, be->name, err) ||
		(*doc = parse_body(resp, be, err)) == NULL)
		return NULL;
	list = json_object_get(*doc, field);
	if (json_is_array(list))
		return list;
	json_decref(*doc);
	mesh_error_set(err, MESH_FAIL_PROTOCOL, "backend \"%s\" answered a list without %s",
				   be->name, field);
	return NULL;
}

static MeshStepResult
sandboxd_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	json_t	   *list = listed_array(be, resp, "workspaces", &doc, err);
	size_t		i;
	json_t	   *entry;

	if (list == NULL)
		return MESH_STEP_FAILED;
	*items = palloc0(sizeof(MeshListedWorkspace) * (json_array_size(list) + 1));
	*nitems = 0;
	json_array_foreach(list, i, entry)
	{
		const char *id = json_string_value(json_object_get(entry, "id"));
		const char *state = json_string_value(json_object_get(entry, "state"));

		if (id == NULL)
			continue;
		(*items)[*nitems].ref = pstrdup(id);
		(*items)[*nitems].running = state && strcmp(state, "running") == 0;
		(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

/* The transport deadline of a capture: 1 GB of small files copies in about a minute here. */
#define SANDBOXD_CAPTURE_TIMEOUT_MS (30L * 60 * 1000)

/* Snapshot names: the install id keeps installs apart, like workspaces'. */
static char *
sandboxd_snapshot_ref(const MeshBackend *be, const char *install_id, int64_t snapshot_id)
{
	return psprintf("mesh-%s-snap-%lld", install_id, (long long) snapshot_id);
}

static bool
sandboxd_snapshot_capture_request(const MeshBackend *be, MeshOpState *st, const char *snap_ref,
								  const char *ref, const char *install_id, MeshHttpRequest *req,
								  MeshError *err)
{
	json_t	   *body = json_pack("{s:s,s:{s:s,s:s}}", "workspace", ref, "labels",
								 "mesh.install", install_id, "mesh.backend", be->name);

	sandboxd_begin(be, req, "PUT", psprintf("/v1/snapshots/%s", snap_ref));
	/* a copy: its time grows with the tree, like an exec's with its timeout */
	req->timeout_ms = Max(req->timeout_ms, SANDBOXD_CAPTURE_TIMEOUT_MS);
	mesh_http_json_body(req, body);
	return true;
}

/* One snapshot object of the daemon: its id, whether it is ready, its size. */
static bool
snapshot_from_json(json_t *entry, MeshSnapshotInfo *info)
{
	const char *id = json_string_value(json_object_get(entry, "id"));
	const char *state = json_string_value(json_object_get(entry, "state"));
	json_t	   *bytes = json_object_get(entry, "bytes");
	json_t	   *files = json_object_get(entry, "files");

	if (id == NULL || state == NULL)
		return false;
	info->ref = pstrdup(id);
	info->ready = strcmp(state, "ready") == 0;
	info->size_bytes = json_is_integer(bytes) && json_integer_value(bytes) >= 0
		? json_integer_value(bytes) : 0;
	info->file_count = json_is_integer(files) && json_integer_value(files) >= 0
		? json_integer_value(files) : 0;
	return true;
}

static MeshStepResult
sandboxd_snapshot_capture_response(const MeshBackend *be, MeshOpState *st,
								   const MeshHttpResponse *resp, MeshSnapshotInfo *info,
								   MeshError *err)
{
	json_t	   *doc;
	bool		ok;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	doc = parse_body(resp, be, err);
	if (doc == NULL)
		return MESH_STEP_FAILED;
	ok = snapshot_from_json(doc, info) && info->ready;
	/* the worker never repeats a capture: an existing one is not this capture's */
	if (ok && !json_is_true(json_object_get(doc, "captured")))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" already has a snapshot named \"%s\" that this capture did not make (left by an earlier installation?); the reaper deletes it once no row explains it",
					   be->name, info->ref);
		return MESH_STEP_FAILED;
	}
	json_decref(doc);
	if (!ok)
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" answered a capture without a ready snapshot", be->name);
	return mesh_step(ok);
}

static bool
sandboxd_snapshot_delete_request(const MeshBackend *be, MeshOpState *st, const char *snap_ref,
								 MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "DELETE", psprintf("/v1/snapshots/%s", snap_ref));
	return true;
}

/* A snapshot that is already gone counts as deleted. */
static MeshStepResult
sandboxd_snapshot_delete_response(const MeshBackend *be, MeshOpState *st,
								  const MeshHttpResponse *resp, MeshError *err)
{
	return deleted_or_gone(be, resp, err);
}

static bool
sandboxd_snapshot_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
							   MeshHttpRequest *req, MeshError *err)
{
	sandboxd_begin(be, req, "GET", "/v1/snapshots");
	st->data = pstrdup(install_id);	/* the parser keeps this install's only */
	return true;
}

/*
 * This backend's snapshots of this install (labels mesh.install and
 * mesh.backend: two catalog entries on one daemon never take each other's
 * for strays), and every capture in flight (listed without labels: never
 * taken for vanished).
 */
static MeshStepResult
sandboxd_snapshot_list_response(const MeshBackend *be, MeshOpState *st,
								const MeshHttpResponse *resp, MeshSnapshotInfo **items,
								int *nitems, MeshError *err)
{
	json_t	   *doc;
	json_t	   *list = listed_array(be, resp, "snapshots", &doc, err);
	size_t		i;
	json_t	   *entry;

	if (list == NULL)
		return MESH_STEP_FAILED;
	*items = palloc0(sizeof(MeshSnapshotInfo) * (json_array_size(list) + 1));
	*nitems = 0;
	json_array_foreach(list, i, entry)
	{
		json_t	   *labels = json_object_get(entry, "labels");
		const char *install = json_string_value(json_object_get(labels, "mesh.install"));
		const char *backend = json_string_value(json_object_get(labels, "mesh.backend"));
		bool		ours = install && backend && strcmp(install, (const char *) st->data) == 0 &&
			strcmp(backend, be->name) == 0;
		const char *state = json_string_value(json_object_get(entry, "state"));

		if ((ours || (state && strcmp(state, "capturing") == 0)) &&
			snapshot_from_json(entry, &(*items)[*nitems]))
			(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

const MeshDriver mesh_sandboxd_driver = {
	.name = "sandboxd",
	.validate_config = sandboxd_validate_config,
	.needs_credential = sandboxd_needs_credential,
	.declared_capabilities = sandboxd_declared_capabilities,
	.workspace_ref = mesh_workspace_ref,
	.acquire_request = sandboxd_acquire_request,
	.acquire_response = sandboxd_acquire_response,
	.exec_request = sandboxd_exec_request,
	.exec_response = sandboxd_exec_response,
	.kill_request = sandboxd_kill_request,
	.kill_response = sandboxd_kill_response,
	.extend_request = sandboxd_extend_request,
	.extend_response = sandboxd_extend_response,
	.exec_start_response = sandboxd_exec_start_response,
	.exec_output_request = sandboxd_exec_output_request,
	.exec_output_response = sandboxd_exec_output_response,
	.exec_forget_request = sandboxd_exec_forget_request,
	.exec_forget_response = sandboxd_exec_forget_response,
	.read_request = sandboxd_read_request,
	.read_response = sandboxd_read_response,
	.write_request = sandboxd_write_request,
	.write_response = sandboxd_write_response,
	.release_request = sandboxd_release_request,
	.release_response = sandboxd_release_response,
	.list_request = sandboxd_list_request,
	.list_response = sandboxd_list_response,
	.snapshot_ref = sandboxd_snapshot_ref,
	.snapshot_capture_request = sandboxd_snapshot_capture_request,
	.snapshot_capture_response = sandboxd_snapshot_capture_response,
	.snapshot_delete_request = sandboxd_snapshot_delete_request,
	.snapshot_delete_response = sandboxd_snapshot_delete_response,
	.snapshot_list_request = sandboxd_snapshot_list_request,
	.snapshot_list_response = sandboxd_snapshot_list_response,
};
