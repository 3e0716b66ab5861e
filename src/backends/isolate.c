/*-------------------------------------------------------------------------
 *
 * isolate.c
 *	  Driver for mesh-isolated, the isolate-runtime host (src/isolated/).
 *
 * The host runs a JavaScript snippet in a fresh V8 isolate with no
 * filesystem, no subprocess, no environment and no network but the run's
 * allowlist (egress_control: the runtime's permission list).  It declares
 * exactly that: eval, and none of shell, files, snapshot or hibernate, so
 * the layer above refuses commands and file calls by capability before it
 * asks.  A "workspace" here holds nothing: acquire and release only check
 * that the host answers, and an evaluation is an exec whose spec says eval
 * (argv = [language, code], stdin = the input as JSON).
 *
 *	  {"url": "http://127.0.0.1:5690"}		loopback, no credential
 *	  {"embedded": true}					the host the extension supervises
 *											(mesh.isolate_port, isolated_launcher.c)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"
#include "settings.h"

#include "backends/backend.h"

/* The config: the host's URL, and the transport deadline of a request. */
static const char *
isolate_validate_config(json_t *config)
{
	const char *key;
	json_t	   *value;
	json_t	   *url = json_object_get(config, "url");
	json_t	   *embedded = json_object_get(config, "embedded");

	json_object_foreach(config, key, value)
	{
		if (strcmp(key, "url") != 0 && strcmp(key, "embedded") != 0 && strcmp(key, "request_timeout_ms") != 0)
			return psprintf("%s: unknown field (expected url, embedded, request_timeout_ms)", key);
	}
	if ((url != NULL) == (embedded != NULL))
		return "url/embedded: exactly one of them must be given";
	if (embedded && !json_is_true(embedded))
		return "embedded: must be true when given";
	if (url && (!json_is_string(url) || strncmp(json_string_value(url), "http://", 7) != 0))
		return "url: must start with http://";
	value = json_object_get(config, "request_timeout_ms");
	if (value && (!json_is_integer(value) || json_integer_value(value) <= 0))
		return "request_timeout_ms: must be a positive integer";
	return NULL;
}

static bool
isolate_needs_credential(json_t *config)
{
	return false;
}

/* Evaluation only: what the host cannot do is declared absent, never discovered. */
static void
isolate_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->eval = true;
	caps->caller_chosen_id = true;
	caps->resource_limits = true;	/* wall time, CPU time, memory, output, isolates per host */
	caps->egress_control = true;	/* the runtime's permission list: only the allowed hosts */
}

/* A request to the host at PATH, with the configured deadline. */
static void
isolate_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method, const char *path,
			  long timeout_ms)
{
	json_t	   *url = json_object_get(be->config, "url");
	const char *base = url ? json_string_value(url) : psprintf("http://127.0.0.1:%d", mesh_isolate_port);
	json_t	   *timeout = json_object_get(be->config, "request_timeout_ms");
	size_t		len = strlen(base);

	memset(req, 0, sizeof(*req));
	req->method = method;
	req->url = psprintf("%.*s%s", (int) (len > 0 && base[len - 1] == '/' ? len - 1 : len), base, path);
	req->timeout_ms = timeout ? (long) json_integer_value(timeout) : 10000;
	if (timeout_ms > 0)
		req->timeout_ms += timeout_ms;
}

/* Acquire, release and list only ask whether the host is there. */
static bool
isolate_health_request(const MeshBackend *be, MeshHttpRequest *req, MeshError *err)
{
	isolate_begin(be, req, "GET", "/v1/health", 0);
	return true;
}

static bool
isolate_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	if (!mesh_acquire_without_snapshot(be, spec, err))
		return false;
	return isolate_health_request(be, req, err);
}

static MeshStepResult
isolate_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshCapabilities *caps, MeshError *err)
{
	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	isolate_declared_capabilities(be, caps);
	return MESH_STEP_DONE;
}

/*
 * The hosts an evaluation may reach: the domains of the run's allowlist
 * (wildcards as "*.example.com", which the runtime's permission list takes
 * as they are).  None in open mode, or with no policy: an evaluation never
 * gets the network wholesale, where loopback alone would reach this server
 * and the hosts beside it.
 */
static json_t *
isolate_allow_hosts(const char *egress)
{
	json_t	   *policy = egress ? json_loads(egress, 0, NULL) : NULL;
	json_t	   *hosts = json_array();
	json_t	   *domains = policy ? json_object_get(policy, "domains") : NULL;
	const char *mode = policy ? json_string_value(json_object_get(policy, "mode")) : NULL;
	size_t		i;
	json_t	   *d;

	if (mode && strcmp(mode, "allowlist") == 0 && json_is_true(json_object_get(policy, "enforced")))
		json_array_foreach(domains, i, d)
			if (json_is_string(d))
				json_array_append(hosts, d);
	if (policy)
		json_decref(policy);
	return hosts;
}

/*
 * An evaluation: argv is [language, code], stdin the input as JSON text.
 * A command (spec->eval false) is refused: the layer above never sends one,
 * as the shell capability is not declared.
 */
static bool
isolate_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					 const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	json_t	   *body;
	json_t	   *input = NULL;

	if (!spec->eval || spec->argc != 2 || spec->background)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" cannot run commands, only evaluate snippets", be->name);
		return false;
	}
	if (spec->stdin_data)
	{
		input = json_loadb(spec->stdin_data, spec->stdin_len, JSON_DECODE_ANY, NULL);
		if (input == NULL)
		{
			mesh_error_set(err, MESH_FAIL_BAD_REQUEST, "the evaluation's input is not JSON");
			return false;
		}
	}
	isolate_begin(be, req, "POST", "/v1/eval", spec->timeout_ms);
	body = json_pack("{s:s,s:s,s:o,s:o,s:I,s:I}",
					 "language", spec->argv[0], "code", spec->argv[1],
					 "input", input ? input : json_null(),
					 "allow_hosts", isolate_allow_hosts(spec->egress),
					 "timeout_ms", (json_int_t) spec->timeout_ms,
					 /* half the exec's bound for console output: the answer wrapping it
					  * (value, error, escapes) must fit the stored stdout whole */
					 "max_output_bytes", (json_int_t) (spec->max_output_bytes / 2));
	mesh_http_json_body(req, body);
	return true;
}

/*
 * The host's answer becomes the exec's result: stdout is the row mesh_eval
 * returns, as JSON ({"value","stdout","error","duration_ms"}), exit code 0
 * for a value and 1 for an error; denied network attempts are egress denials.
 */
static MeshStepResult
isolate_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshExecResult *result, MeshError *err)
{
	json_t	   *doc;
	json_t	   *row;
	json_t	   *denials;
	char	   *text;
	double		duration_ms;

	/* the host died (or was restarted by its supervisor) with the evaluation in it */
	if (resp->transport_error && !resp->out_of_descriptors)
	{
		mesh_error_set(err, MESH_FAIL_UNAVAILABLE,
					   "backend \"%s\": the isolate host went away during the evaluation (%s)",
					   be->name, resp->transport_error);
		return MESH_STEP_FAILED;
	}
	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
	if (doc == NULL || !json_is_object(doc))
	{
		if (doc)
			json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL, "backend \"%s\" answered an evaluation with no JSON object",
					   be->name);
		return MESH_STEP_FAILED;
	}
	memset(result, 0, sizeof(*result));
	duration_ms = json_number_value(json_object_get(doc, "duration_ms"));
	row = json_pack("{s:O,s:O,s:O,s:f,s:b}",
					"value", json_object_get(doc, "value") ? json_object_get(doc, "value") : json_null(),
					"stdout", json_object_get(doc, "stdout") ? json_object_get(doc, "stdout") : json_string(""),
					"error", json_object_get(doc, "error") ? json_object_get(doc, "error") : json_null(),
					"duration_ms", duration_ms,
					"output_limited", json_is_true(json_object_get(doc, "output_limited")));
	text = json_dumps(row, JSON_COMPACT);
	result->stdout_data = pstrdup(text);
	result->stdout_len = strlen(text);
	result->stdout_total = (int64_t) result->stdout_len;
	result->stderr_data = pstrdup("");
	free(text);
	json_decref(row);
	result->exit_code = json_is_string(json_object_get(doc, "error")) ? 1 : 0;
	result->timed_out = json_is_true(json_object_get(doc, "timed_out"));
	result->wall_seconds = duration_ms / 1000.0;
	denials = json_object_get(doc, "egress_denials");
	if (json_is_array(denials) && json_array_size(denials) > 0)
	{
		char	   *d = json_dumps(denials, JSON_COMPACT);

		result->egress_denials = pstrdup(d);
		free(d);
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

static bool
isolate_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *exec_key,
					 const char *signal, MeshHttpRequest *req, MeshError *err)
{
	/* an evaluation ends with its request: the worker's cancel drops the connection */
	return isolate_health_request(be, req, err);
}

static MeshStepResult
isolate_ok_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp, MeshError *err)
{
	return mesh_step(mesh_http_error_from_json(resp, be->name, err));
}

/* No files: the capability is absent, and a request that came anyway is refused. */
static bool
isolate_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					 MeshHttpRequest *req, MeshError *err)
{
	mesh_error_set(err, MESH_FAIL_BAD_REQUEST, "backend \"%s\" holds no files (it only evaluates snippets)",
				   be->name);
	return false;
}

static MeshStepResult
isolate_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  const char **data, size_t *len, MeshError *err)
{
	return MESH_STEP_FAILED;
}

static bool
isolate_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					  int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	return isolate_read_request(be, st, ref, path, req, err);
}

static bool
isolate_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	return isolate_health_request(be, req, err);
}

static MeshStepResult
isolate_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshReleaseOutcome *outcome, MeshError *err)
{
	*outcome = MESH_RELEASE_DESTROYED;
	return isolate_ok_response(be, st, resp, err);
}

static bool
isolate_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
					 MeshHttpRequest *req, MeshError *err)
{
	return isolate_health_request(be, req, err);
}

/* Nothing outlives an evaluation: the host never holds a workspace to reconcile. */
static MeshStepResult
isolate_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	*items = NULL;
	*nitems = 0;
	return isolate_ok_response(be, st, resp, err);
}

const MeshDriver mesh_isolate_driver = {
	.name = "isolate",
	.validate_config = isolate_validate_config,
	.needs_credential = isolate_needs_credential,
	.declared_capabilities = isolate_declared_capabilities,
	.workspace_ref = mesh_workspace_ref,
	.acquire_request = isolate_acquire_request,
	.acquire_response = isolate_acquire_response,
	.exec_request = isolate_exec_request,
	.exec_response = isolate_exec_response,
	.kill_request = isolate_kill_request,
	.kill_response = isolate_ok_response,
	.read_request = isolate_read_request,
	.read_response = isolate_read_response,
	.write_request = isolate_write_request,
	.write_response = isolate_ok_response,
	.release_request = isolate_release_request,
	.release_response = isolate_release_response,
	.list_request = isolate_list_request,
	.list_response = isolate_list_response,
};
