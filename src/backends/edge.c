/*-------------------------------------------------------------------------
 *
 * edge.c
 *	  Driver for an edge-container service in the style of Fly.io Sprites:
 *	  one workspace is one sprite, created by the caller's name.
 *
 * A sprite is a persistent Linux environment that sleeps when idle
 * (filesystem kept, processes stopped) and wakes on any request.  So the
 * workspace's name is the sprite's name (caller_chosen_id), release with
 * hibernation leaves the sprite to sleep, and release without it deletes
 * the sprite.  The sprite cannot be told what its network may reach, so
 * egress_control is false: a policy that refuses uncontrolled egress
 * refuses this backend before anything is created.  No snapshots (the
 * service's checkpoints rewind a sprite in place; they are not a new
 * workspace's starting point) and no background commands.
 *
 * Config (mesh.backends.config):
 *	  {"api_url": "https://api.sprites.dev"}
 *	  optional: "request_timeout_ms" (default 60000)
 * The credential (mesh.backend_set_credential) is the API token; it
 * travels only in the Authorization header.
 *
 * Pure request builders and response parsers: no I/O happens here.  This
 * file holds the config, capabilities, the vtable and the operations inside
 * a sprite (exec, kill, files); the sprite's life (create, release, list)
 * is in edge_sprite.c and the readers of answers in edge_parse.c.  The
 * answer of an exec or a file read is the sprite's agent's own, read by
 * the sandboxd driver's parsers (test/edge/sprites_double.py says why).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/edge.h"

#define EDGE_DEFAULT_REQUEST_TIMEOUT_MS 60000

/* Known fields only, an http(s) URL without userinfo (a token belongs in the credential). */
static const char *
edge_validate_config(json_t *config)
{
	json_t	   *url = json_object_get(config, "api_url");
	json_t	   *timeout = json_object_get(config, "request_timeout_ms");
	const char *key;
	json_t	   *value;

	json_object_foreach(config, key, value)
	{
		if (strcmp(key, "api_url") != 0 && strcmp(key, "request_timeout_ms") != 0)
			return psprintf("%s: unknown field (expected api_url, request_timeout_ms)", key);
	}
	if (!json_is_string(url) ||
		(strncmp(json_string_value(url), "http://", 7) != 0 &&
		 strncmp(json_string_value(url), "https://", 8) != 0))
		return "api_url: must be a URL starting with http:// or https://";
	if (strchr(json_string_value(url), '@') || strchr(json_string_value(url), '?'))
		return "api_url: must not carry credentials or a query (set the token with mesh.backend_set_credential)";
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 1000 ||
					json_integer_value(timeout) > 3600000))
		return "request_timeout_ms: must be an integer from 1000 to 3600000";
	return NULL;
}

/* Every call to the service is authenticated with the API token. */
static bool
edge_needs_credential(json_t *config)
{
	return true;
}

/*
 * What a sprite is: a shell, hibernation (it sleeps), the caller's name;
 * no egress control, no snapshots, no background commands.
 */
void
edge_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->shell = true;
	caps->hibernate = true;
	caps->caller_chosen_id = true;
	caps->egress_control = false;
	caps->snapshot = false;
	caps->background = false;
}

/*
 * The sprite's name: "mesh-<install>-<backend tag>-<id>", where the tag is
 * a hash of the catalog name.  Two catalog entries may share one account
 * (one organization's sprites); each reaper's list (by name prefix) must see
 * only its own entry's sprites, or it would take the other's for orphans.
 */
char *
edge_sprite_prefix(const MeshBackend *be, const char *install_id)
{
	uint32_t	h = 2166136261u;	/* FNV-1a */

	for (const char *p = be->name ? be->name : ""; *p; p++)
		h = (h ^ (unsigned char) *p) * 16777619u;
	return psprintf("mesh-%s-%08x-", install_id, h);
}

static char *
edge_workspace_ref(const MeshBackend *be, const char *install_id, int64_t workspace_id)
{
	return psprintf("%s%lld", edge_sprite_prefix(be, install_id), (long long) workspace_id);
}

/* Start a request to the API: URL, bearer token, deadline. */
void
edge_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method, const char *path)
{
	const char *base = json_string_value(json_object_get(be->config, "api_url"));
	json_t	   *timeout = json_object_get(be->config, "request_timeout_ms");
	size_t		len = strlen(base);

	memset(req, 0, sizeof(*req));
	req->method = method;
	req->url = psprintf("%.*s%s", (int) (len > 0 && base[len - 1] == '/' ? len - 1 : len),
						base, path);
	if (be->credential)
		mesh_http_add_header(req, "Authorization: Bearer %s", be->credential);
	req->timeout_ms = timeout ? (long) json_integer_value(timeout) : EDGE_DEFAULT_REQUEST_TIMEOUT_MS;
}

/*
 * POST /v1/sprites/{name}/exec with the parameters as a JSON body: the
 * environment's values may be secrets, so they never travel in the URL.
 */
static bool
edge_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
				  const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	json_t	   *body = json_object();
	json_t	   *cmd = json_array();

	if (spec->background || spec->eval)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" runs neither background commands nor evaluations", be->name);
		return false;
	}
	edge_begin(be, req, "POST", psprintf("/v1/sprites/%s/exec", mesh_url_encode(ref)));
	for (int i = 0; i < spec->argc; i++)
		json_array_append_new(cmd, json_string(spec->argv[i]));
	json_object_set_new(body, "cmd", cmd);
	if (spec->env)
	{
		json_t	   *env = json_array();
		const char *key;
		json_t	   *value;

		json_object_foreach(spec->env, key, value)
			json_array_append_new(env, json_string(psprintf("%s=%s", key, json_string_value(value))));
		json_object_set_new(body, "env", env);
	}
	if (spec->dir)
		json_object_set_new(body, "dir", json_string(spec->dir));
	json_object_set_new(body, "timeout_ms", json_integer(spec->timeout_ms));
	json_object_set_new(body, "max_output_bytes", json_integer(spec->max_output_bytes));
	json_object_set_new(body, "exec_key", json_string(spec->exec_key));
	if (spec->stdin_data)
		mesh_http_json_body_b64(req, body, "stdin_b64", spec->stdin_data, spec->stdin_len);
	else
		mesh_http_json_body(req, body);
	/* the transport deadline outlasts the command's own timeout */
	req->timeout_ms += spec->timeout_ms;
	return true;
}

/* The sprite's agent's answer (the service's own errors share its error shape). */
static MeshStepResult
edge_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   MeshExecResult *result, MeshError *err)
{
	return mesh_sandboxd_driver.exec_response(be, st, resp, result, err);
}

static bool
edge_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *exec_key,
				  const char *signal, MeshHttpRequest *req, MeshError *err)
{
	edge_begin(be, req, "POST", psprintf("/v1/sprites/%s/exec/%s/kill", mesh_url_encode(ref),
										 mesh_url_encode(exec_key)));
	mesh_http_json_body(req, json_pack("{s:s}", "signal", signal ? signal : "KILL"));
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/* A sprite that is gone has nothing left to kill; an ended exec neither. */
static MeshStepResult
edge_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   MeshError *err)
{
	MeshError	answer = {0};

	if (mesh_http_error_from_json(resp, be->name, &answer))
		return MESH_STEP_DONE;
	if (resp->status == 404 && answer.code &&
		(strcmp(answer.code, "exec_not_found") == 0 || strcmp(answer.code, "not_found") == 0))
		return MESH_STEP_DONE;
	*err = answer;
	return MESH_STEP_FAILED;
}

static bool
edge_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				  MeshHttpRequest *req, MeshError *err)
{
	edge_begin(be, req, "GET", psprintf("/v1/sprites/%s/fs/read?path=%s", mesh_url_encode(ref),
										mesh_url_encode(path)));
	return true;
}

static MeshStepResult
edge_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   const char **data, size_t *len, MeshError *err)
{
	return mesh_sandboxd_driver.read_response(be, st, resp, data, len, err);
}

static bool
edge_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				   int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	edge_begin(be, req, "PUT", psprintf("/v1/sprites/%s/fs/write?path=%s&mode=%d",
										mesh_url_encode(ref), mesh_url_encode(path), mode));
	req->body = data;
	req->body_len = len;
	mesh_http_add_header(req, "Content-Type: application/octet-stream");
	return true;
}

static MeshStepResult
edge_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					MeshError *err)
{
	return mesh_step(mesh_http_error_from_json(resp, be->name, err));
}

const MeshDriver mesh_edge_driver = {
	.name = "edge",
	.validate_config = edge_validate_config,
	.needs_credential = edge_needs_credential,
	.declared_capabilities = edge_declared_capabilities,
	.workspace_ref = edge_workspace_ref,
	.acquire_request = edge_acquire_request,
	.acquire_response = edge_acquire_response,
	.exec_request = edge_exec_request,
	.exec_response = edge_exec_response,
	.kill_request = edge_kill_request,
	.kill_response = edge_kill_response,
	.read_request = edge_read_request,
	.read_response = edge_read_response,
	.write_request = edge_write_request,
	.write_response = edge_write_response,
	.release_request = edge_release_request,
	.release_response = edge_release_response,
	.list_request = edge_list_request,
	.list_response = edge_list_response,
};
