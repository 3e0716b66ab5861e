/*-------------------------------------------------------------------------
 *
 * docker.c
 *	  Driver for the Docker Engine API (API version 1.41, over a unix socket).
 *
 * A workspace is a container from the configured image: no network, the size
 * tier's memory/CPU/pids limits, a read-only root, all capabilities dropped,
 * no-new-privileges, an unprivileged user, and two anonymous volumes: the
 * workspace (/workspace) and the driver's own scratch (/run/mesh), both owned
 * by that user in the image (the archive API writes only into volumes when
 * the root is read-only).
 *
 * Config (mesh.backends.config):
 *	  {"socket": "/var/run/docker.sock", "image": "name:tag"}	required
 *	  optional: "user": "uid:gid" (numeric, default 1000:1000),
 *				"release": "destroy" | "hibernate" (stop and keep the container),
 *				"request_timeout_ms"
 *
 * The image needs a POSIX sh with sleep, setsid, kill, head, tail, wc,
 * readlink -f and mkdir -p (busybox is enough): commands run under a small
 * wrapper (docker_exec_wrapper in docker_background.c) that enforces the timeout by
 * killing the command's process group, clamps output and reports what
 * happened on a trailer at the end of stderr.  Stdin travels as a file through the archive
 * API, because this transport cannot hijack the exec connection.
 *
 * Background commands (spec->background) run under a wrapper of their own
 * that a detached exec starts; their scripts and the reader of their output
 * live in docker_background.c (docker.h).
 *
 * Every operation is a state machine over pure request builders and response
 * parsers (see backend.h): no I/O happens here.  This file holds the
 * driver's config, capabilities, acquire, release and list, and its
 * vtable; exec, kill and background commands are in docker_exec.c, file
 * read and write in docker_files.c, and the Engine API helpers they share
 * in docker_api.c (docker_api.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/docker_api.h"

#define DOCKER_LABEL "mesh.install"
#define DOCKER_BACKEND_LABEL "mesh.backend"

/*--------------------------------------------------------------------------
 * Config and capabilities
 *--------------------------------------------------------------------------
 */

/* A numeric "uid:gid": names would need the image's passwd file to agree. */
static bool
valid_user(const char *user)
{
	const char *colon = strchr(user, ':');

	if (colon == NULL || colon == user || colon[1] == '\0')
		return false;
	for (const char *p = user; *p; p++)
		if (p != colon && !isdigit((unsigned char) *p))
			return false;
	return true;
}

/* Name the first bad field, so the admin sees what to fix. */
static const char *
docker_validate_config(json_t *config)
{
	json_t	   *socket = json_object_get(config, "socket");
	json_t	   *image = json_object_get(config, "image");
	json_t	   *user = json_object_get(config, "user");
	json_t	   *release = json_object_get(config, "release");
	json_t	   *timeout = json_object_get(config, "request_timeout_ms");
	const char *key;
	json_t	   *value;

	json_object_foreach(config, key, value)
	{
		if (strcmp(key, "socket") != 0 && strcmp(key, "image") != 0 &&
			strcmp(key, "user") != 0 && strcmp(key, "release") != 0 &&
			strcmp(key, "request_timeout_ms") != 0)
			return psprintf("%s: unknown field (expected socket, image, user, release, request_timeout_ms)", key);
	}
	if (socket == NULL || !json_is_string(socket) || json_string_value(socket)[0] != '/')
		return "socket: the Docker daemon's unix socket must be given as an absolute path";
	if (image == NULL || !json_is_string(image) || json_string_value(image)[0] == '\0' ||
		strpbrk(json_string_value(image), " \"\\") != NULL)
		return "image: must name an image the daemon has (e.g. \"mesh-sandbox:latest\")";
	if (user && (!json_is_string(user) || !valid_user(json_string_value(user))))
		return "user: must be a numeric \"uid:gid\" (e.g. \"1000:1000\")";
	if (user && strncmp(json_string_value(user), "0:", 2) == 0)
		return "user: must not be root (0)";
	if (release && (!json_is_string(release) ||
					(strcmp(json_string_value(release), "destroy") != 0 &&
					 strcmp(json_string_value(release), "hibernate") != 0)))
		return "release: must be \"destroy\" or \"hibernate\"";
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 100))
		return "request_timeout_ms: must be an integer of at least 100";
	return NULL;
}

/* Access to the socket is the credential: file permissions, nothing stored. */
static bool
docker_needs_credential(json_t *config)
{
	return false;
}

/*
 * What a container enforces: limits (unless the daemon drops them, seen at
 * create), no network at all; but no per-exec CPU metering, no outbound
 * allowlist (network is none or nothing) and no project-state snapshots:
 * the driver has no way to capture /workspace apart from the image (a volume
 * per snapshot and a copy-on-write view of it are not implemented), and
 * committing the container would capture the base image with the project.
 */
static void
docker_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->shell = true;
	caps->resource_limits = true;
	caps->hibernate = true;
	caps->caller_chosen_id = true;
	caps->background = true;
}

/*--------------------------------------------------------------------------
 * Acquire: create (or find our own), start
 *--------------------------------------------------------------------------
 */

/* Each tier in the driver's own units: memory, CPUs, processes. */
static void
tier_limits(MeshSize size, json_int_t *memory, json_int_t *nano_cpus, json_int_t *pids)
{
	static const int mb[] = {256, 512, 1024, 2048};
	static const int milli_cpus[] = {500, 1000, 2000, 4000};
	static const int max_pids[] = {128, 256, 512, 1024};

	*memory = (json_int_t) mb[size] * 1024 * 1024;
	*nano_cpus = (json_int_t) milli_cpus[size] * 1000000;
	*pids = max_pids[size];
}

/* The container: confined, idle under tini until execs arrive. */
static json_t *
container_spec(const MeshBackend *be, MeshSize size, const char *install_id)
{
	json_int_t	memory;
	json_int_t	nano_cpus;
	json_int_t	pids;

	tier_limits(size, &memory, &nano_cpus, &pids);
	return json_pack("{s:s,s:[s,s],s:s,s:[s,s],s:s,s:b,s:{s:s,s:s,s:s},s:{"
					 "s:s,s:b,s:[s],s:[s],s:b,s:I,s:I,s:I,s:I,"
					 "s:[{s:s,s:s},{s:s,s:s}]}}",
					 "Image", json_string_value(json_object_get(be->config, "image")),
					 "Entrypoint", "/bin/sleep", "2147483647",
					 "User", docker_config_user(be),
					 "Env", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" DOCKER_WORKSPACE,
					 "WorkingDir", DOCKER_WORKSPACE,
					 "NetworkDisabled", 1,
					 "Labels", DOCKER_LABEL, install_id, DOCKER_BACKEND_LABEL, be->name,
					 "mesh.size", mesh_size_name(size),
					 "HostConfig",
					 "NetworkMode", "none",
					 "ReadonlyRootfs", 1,
					 "CapDrop", "ALL",
					 "SecurityOpt", "no-new-privileges",
					 "Init", 1,
					 "Memory", memory,
					 "MemorySwap", memory,
					 "NanoCpus", nano_cpus,
					 "PidsLimit", pids,
					 "Mounts",
					 "Type", "volume", "Target", DOCKER_WORKSPACE,
					 "Type", "volume", "Target", DOCKER_SCRATCH);
}

static bool
docker_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					   const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op;

	if (!mesh_acquire_without_snapshot(be, spec, err))
		return false;
	op = docker_op_new(st, ref);
	op->install_id = pstrdup(spec->install_id);
	op->phase = PH_CREATE;
	docker_begin(be, req, "POST", psprintf("/containers/create?name=%s", mesh_url_encode(ref)));
	mesh_http_json_body(req, container_spec(be, spec->size, spec->install_id));
	return true;
}

/* A create warning about a limit means the host does not enforce it. */
static bool
warns_of_dropped_limits(json_t *doc)
{
	json_t	   *warnings = json_object_get(doc, "Warnings");
	size_t		i;
	json_t	   *w;

	json_array_foreach(warnings, i, w)
	{
		const char *text = json_string_value(w);

		if (text && (strstr(text, "limit") || strstr(text, "memory") || strstr(text, "CPU") ||
					 strstr(text, "cpu")))
			return true;
	}
	return false;
}

static void
container_start_request(const MeshBackend *be, DockerOp *op, MeshHttpRequest *req)
{
	op->phase = PH_START;
	docker_begin(be, req, "POST", psprintf("/containers/%s/start", mesh_url_encode(op->ref)));
}

/* Created, or the name is taken: inspect it to see whether it is ours. */
static MeshStepResult
acquire_created(const MeshBackend *be, MeshOpState *st, DockerOp *op,
				const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;

	if (resp->status == 409)
	{
		op->phase = PH_INSPECT;
		docker_begin(be, &st->next, "GET", psprintf("/containers/%s/json", mesh_url_encode(op->ref)));
		return MESH_STEP_NEXT;
	}
	if (resp->status == 404 && !resp->transport_error)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Docker) has no image \"%s\": %s; import or pull it on the Docker host",
					   be->name, json_string_value(json_object_get(be->config, "image")),
					   docker_message(resp));
		return MESH_STEP_FAILED;
	}
	if (!docker_ok(resp, be, "create a container", err))
		return MESH_STEP_FAILED;
	if ((doc = docker_parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	op->limits_dropped = warns_of_dropped_limits(doc);
	json_decref(doc);
	container_start_request(be, op, &st->next);
	return MESH_STEP_NEXT;
}

/* A container by our name exists: only one labelled with our install and entry is ours. */
static MeshStepResult
acquire_inspected(const MeshBackend *be, MeshOpState *st, DockerOp *op,
				  const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;
	const char *owner = NULL;
	const char *entry = NULL;

	if (!docker_ok(resp, be, "inspect an existing container", err))
		return MESH_STEP_FAILED;
	if ((doc = docker_parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	json_unpack(doc, "{s:{s:{s?s,s?s}}}", "Config", "Labels", DOCKER_LABEL, &owner,
				DOCKER_BACKEND_LABEL, &entry);
	if (owner == NULL || strcmp(owner, op->install_id) != 0 ||
		entry == NULL || strcmp(entry, be->name) != 0)
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Docker): a container named \"%s\" exists and does not belong to this installation and backend (name conflict)",
					   be->name, op->ref);
		return MESH_STEP_FAILED;
	}
	json_decref(doc);
	container_start_request(be, op, &st->next);
	return MESH_STEP_NEXT;
}

/* create -> [inspect] -> start; 304 from start means it already runs. */
static MeshStepResult
docker_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshCapabilities *caps, MeshError *err)
{
	DockerOp   *op = st->data;

	switch (op->phase)
	{
		case PH_CREATE:
			return acquire_created(be, st, op, resp, err);
		case PH_INSPECT:
			return acquire_inspected(be, st, op, resp, err);
		default:
			break;
	}
	if (resp->status != 304 && !docker_ok(resp, be, "start the container", err))
		return MESH_STEP_FAILED;
	docker_declared_capabilities(be, caps);
	if (op->limits_dropped)
		caps->resource_limits = false;
	return MESH_STEP_DONE;
}

/*--------------------------------------------------------------------------
 * Release and list
 *--------------------------------------------------------------------------
 */

static bool
keeps_on_release(const MeshBackend *be, bool prefer_hibernate)
{
	json_t	   *release = json_object_get(be->config, "release");

	return prefer_hibernate ||
		(release && strcmp(json_string_value(release), "hibernate") == 0);
}

/* Hibernate: stop, keeping the container and its volumes.  Else remove both. */
static bool
docker_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					   bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = docker_op_new(st, ref);

	op->keep = keeps_on_release(be, prefer_hibernate);
	if (op->keep)
		docker_begin(be, req, "POST", psprintf("/containers/%s/stop?t=2", mesh_url_encode(ref)));
	else
		docker_begin(be, req, "DELETE", psprintf("/containers/%s?force=1&v=1", mesh_url_encode(ref)));
	req->timeout_ms += 5000;
	return true;
}

/* 304 from stop: already stopped, which is hibernated too. */
static MeshStepResult
docker_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshReleaseOutcome *outcome, MeshError *err)
{
	DockerOp   *op = st->data;

	if (!(op->keep && resp->status == 304) &&
		!docker_ok(resp, be, op->keep ? "stop the container" : "remove the container", err))
		return MESH_STEP_FAILED;
	*outcome = op->keep ? MESH_RELEASE_HIBERNATED : MESH_RELEASE_DESTROYED;
	return MESH_STEP_DONE;
}

/*
 * Every container of this install and this catalog entry, running or
 * stopped, found by labels: two entries may share one daemon, and each
 * must list only what it made, or the reaper would take the other's
 * containers for orphans.
 */
static bool
docker_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
					MeshHttpRequest *req, MeshError *err)
{
	json_t	   *filters = json_pack("{s:[s,s]}", "label",
										psprintf(DOCKER_LABEL "=%s", install_id),
										psprintf(DOCKER_BACKEND_LABEL "=%s", be->name));
	char	   *text = json_dumps(filters, JSON_COMPACT);

	docker_begin(be, req, "GET", psprintf("/containers/json?all=1&filters=%s", mesh_url_encode(text)));
	free(text);
	json_decref(filters);
	return true;
}

static MeshStepResult
docker_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	size_t		i;
	json_t	   *entry;

	if (!docker_ok(resp, be, "list containers", err) || (doc = docker_parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	if (!json_is_array(doc))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL, "backend \"%s\" (Docker) answered a list that is not an array",
					   be->name);
		return MESH_STEP_FAILED;
	}
	*items = palloc0(sizeof(MeshListedWorkspace) * (json_array_size(doc) + 1));
	*nitems = 0;
	json_array_foreach(doc, i, entry)
	{
		const char *name = json_string_value(json_array_get(json_object_get(entry, "Names"), 0));
		const char *state = json_string_value(json_object_get(entry, "State"));

		if (name == NULL)
			continue;
		(*items)[*nitems].ref = pstrdup(name[0] == '/' ? name + 1 : name);
		(*items)[*nitems].running = state && strcmp(state, "running") == 0;
		(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

const MeshDriver mesh_docker_driver = {
	.name = "docker",
	.validate_config = docker_validate_config,
	.needs_credential = docker_needs_credential,
	.declared_capabilities = docker_declared_capabilities,
	.workspace_ref = mesh_workspace_ref,
	.acquire_request = docker_acquire_request,
	.acquire_response = docker_acquire_response,
	.exec_request = docker_exec_request,
	.exec_response = docker_exec_response,
	.kill_request = docker_kill_request,
	.kill_response = docker_kill_response,
	.exec_start_response = docker_exec_start_response,
	.exec_output_request = docker_exec_output_request,
	.exec_output_response = docker_exec_output_response,
	.exec_forget_request = docker_exec_forget_request,
	.exec_forget_response = docker_exec_forget_response,
	.read_request = docker_read_request,
	.read_response = docker_read_response,
	.write_request = docker_write_request,
	.write_response = docker_write_response,
	.release_request = docker_release_request,
	.release_response = docker_release_response,
	.list_request = docker_list_request,
	.list_response = docker_list_response,
};
