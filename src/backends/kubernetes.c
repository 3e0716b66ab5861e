/*-------------------------------------------------------------------------
 *
 * kubernetes.c
 *	  Driver for a Kubernetes cluster: one workspace is one Pod (core/v1).
 *
 * The pod runs mesh-sandboxd in single-workspace mode (deploy/kubernetes/),
 * so everything inside the workspace is the sandboxd protocol: exec, files,
 * kill and background execs' output are the sandboxd driver's own requests,
 * sent through the API
 * server's pods/{name}:{port}/proxy subresource over HTTPS and answered by
 * the daemon in the pod.  This driver adds the pod's life around them:
 * create, wait for Ready (a watch, in windows of one second), adopt or
 * replace a pod a crash left behind (409 AlreadyExists), delete at release,
 * and list by label for the reaper.
 *
 * Config (mesh.backends.config):
 *	  {"api_server": "https://host:6443", "namespace": "mesh",
 *	   "ca_bundle": "-----BEGIN CERTIFICATE-----...", "image": "reg/mesh-sandboxd:tag"}
 *	  optional: "runtime_class", "node_selector" {..}, "tolerations" [..],
 *				"image_pull_policy", "daemon_port" (7070), "request_timeout_ms",
 *				"ready_timeout_ms"
 * The credential (mesh.backend_set_credential) is a service-account bearer
 * token; it travels only in the Authorization header.  The daemon in a pod
 * accepts a key derived from it and the workspace (HMAC-SHA256), sent in
 * X-Mesh-Sandboxd-Token because the API server consumes Authorization.
 *
 * Pure request builders and response parsers: no I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "common/hmac.h"
#include "lib/stringinfo.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "backends/backend.h"
#include "backends/kubernetes.h"

#define K8S_DEFAULT_PORT 7070
#define K8S_DEFAULT_REQUEST_TIMEOUT_MS 30000
#define K8S_DEFAULT_READY_TIMEOUT_MS 120000
#define K8S_WATCH_SECONDS 1
#define K8S_DAEMON_OVERHEAD_MI 128	/* memory of the daemon beside the workspace */
#define K8S_MANAGED_BY "mesh-exec"

extern const MeshDriver mesh_sandboxd_driver;

/* Pod limits per size tier: mesh-sandboxd's tiers (capabilities.c) plus the daemon. */
static const struct
{
	int			memory_mi;
	const char *cpu;
}			tier_resources[] = {
	{512 + K8S_DAEMON_OVERHEAD_MI, "500m"},
	{2048 + K8S_DAEMON_OVERHEAD_MI, "1"},
	{4096 + K8S_DAEMON_OVERHEAD_MI, "2"},
	{8192 + K8S_DAEMON_OVERHEAD_MI, "2"},
};

/* Phases of acquire; each names the answer it awaits. */
typedef enum K8sPhase
{
	PH_CREATE,					/* POST pods */
	PH_INSPECT,					/* GET the pod after AlreadyExists */
	PH_REMOVE_STALE,			/* DELETE a pod of ours that will not serve */
	PH_WATCH,					/* a watch window on the pod */
	PH_DAEMON,					/* the daemon's own acquire, through the proxy */
	PH_DISCARD					/* DELETE of a pod that will not serve, then fail */
} K8sPhase;

/* The driver's state for one operation (MeshOpState.data). */
typedef struct K8sOp
{
	K8sPhase	phase;
	const char *ref;
	MeshAcquireSpec spec;		/* acquire: what was asked, kept for the daemon's acquire */
	TimestampTz deadline;		/* acquire: the pod must serve by then */
	bool		recreate;		/* after the watch window, create again */
	const char *last_state;		/* for the deadline's message */
	MeshError	failure;		/* what the acquire fails with once the pod is discarded */
} K8sOp;

/*--------------------------------------------------------------------------
 * Config and capabilities
 *--------------------------------------------------------------------------
 */

/* RFC 1123 label (namespace, runtime class): what the API server accepts. */
static bool
dns_label(const char *s, size_t max)
{
	size_t		n = strlen(s);

	if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return false;
	return true;
}

static bool
string_field(json_t *value)
{
	return json_is_string(value) && json_string_value(value)[0] != '\0';
}

/* A toleration as core/v1 Toleration: known keys, known operator and effect. */
static const char *
check_toleration(json_t *t)
{
	const char *key;
	json_t	   *value;

	if (!json_is_object(t))
		return "tolerations: each entry must be an object";
	json_object_foreach(t, key, value)
	{
		if (strcmp(key, "tolerationSeconds") == 0)
		{
			if (!json_is_integer(value))
				return "tolerations: tolerationSeconds must be an integer";
			continue;
		}
		if (strcmp(key, "key") != 0 && strcmp(key, "operator") != 0 &&
			strcmp(key, "value") != 0 && strcmp(key, "effect") != 0)
			return psprintf("tolerations: unknown field \"%s\" (expected key, operator, value, effect, tolerationSeconds)", key);
		if (!json_is_string(value))
			return psprintf("tolerations: %s must be a string", key);
	}
	value = json_object_get(t, "operator");
	if (value && strcmp(json_string_value(value), "Exists") != 0 &&
		strcmp(json_string_value(value), "Equal") != 0)
		return "tolerations: operator must be \"Exists\" or \"Equal\"";
	value = json_object_get(t, "effect");
	if (value && json_string_value(value)[0] &&
		strcmp(json_string_value(value), "NoSchedule") != 0 &&
		strcmp(json_string_value(value), "PreferNoSchedule") != 0 &&
		strcmp(json_string_value(value), "NoExecute") != 0)
		return "tolerations: effect must be NoSchedule, PreferNoSchedule or NoExecute";
	return NULL;
}

/* The optional scheduling fields: runtime class, node selector, tolerations, pull policy. */
static const char *
check_scheduling(json_t *config)
{
	json_t	   *runtime = json_object_get(config, "runtime_class");
	json_t	   *selector = json_object_get(config, "node_selector");
	json_t	   *tolerations = json_object_get(config, "tolerations");
	json_t	   *pull = json_object_get(config, "image_pull_policy");
	const char *key;
	json_t	   *value;
	size_t		i;

	if (runtime && (!json_is_string(runtime) || !dns_label(json_string_value(runtime), 253)))
		return "runtime_class: must name a RuntimeClass (lowercase letters, digits, '-', '.'), e.g. \"gvisor\"";
	if (selector && !json_is_object(selector))
		return "node_selector: must be an object of label values";
	json_object_foreach(selector, key, value)
	{
		if (!json_is_string(value))
			return "node_selector: every value must be a string";
	}
	if (tolerations && !json_is_array(tolerations))
		return "tolerations: must be an array of tolerations";
	json_array_foreach(tolerations, i, value)
	{
		const char *problem = check_toleration(value);

		if (problem)
			return problem;
	}
	if (pull && (!json_is_string(pull) ||
				 (strcmp(json_string_value(pull), "Always") != 0 &&
				  strcmp(json_string_value(pull), "IfNotPresent") != 0 &&
				  strcmp(json_string_value(pull), "Never") != 0)))
		return "image_pull_policy: must be \"Always\", \"IfNotPresent\" or \"Never\"";
	return NULL;
}

/* Name the first bad field, so the admin sees what to fix. */
static const char *
k8s_validate_config(json_t *config)
{
	static const char *const known[] = {
		"api_server", "namespace", "ca_bundle", "image", "runtime_class", "node_selector",
		"tolerations", "image_pull_policy", "daemon_port", "request_timeout_ms", "ready_timeout_ms",
	};
	json_t	   *api = json_object_get(config, "api_server");
	json_t	   *ns = json_object_get(config, "namespace");
	json_t	   *ca = json_object_get(config, "ca_bundle");
	json_t	   *image = json_object_get(config, "image");
	json_t	   *port = json_object_get(config, "daemon_port");
	json_t	   *timeout = json_object_get(config, "request_timeout_ms");
	json_t	   *ready = json_object_get(config, "ready_timeout_ms");
	const char *key;
	json_t	   *value;

	json_object_foreach(config, key, value)
	{
		bool		found = false;

		for (size_t i = 0; i < lengthof(known); i++)
			found |= strcmp(key, known[i]) == 0;
		if (!found)
			return psprintf("%s: unknown field (expected api_server, namespace, ca_bundle, image, runtime_class, node_selector, tolerations, image_pull_policy, daemon_port, request_timeout_ms, ready_timeout_ms)", key);
	}
	if (!string_field(api) || strncmp(json_string_value(api), "https://", 8) != 0)
		return "api_server: must be the API server's https:// URL (e.g. \"https://10.0.0.1:6443\")";
	if (strpbrk(json_string_value(api) + 8, "@?# ") != NULL)
		return "api_server: must be a plain URL: no credentials, query or fragment (set the token with mesh.backend_set_credential)";
	if (!json_is_string(ns) || !dns_label(json_string_value(ns), 63) || strchr(json_string_value(ns), '.'))
		return "namespace: must be a namespace name (lowercase letters, digits and '-', at most 63)";
	if (!json_is_string(ca) || strstr(json_string_value(ca), "-----BEGIN CERTIFICATE-----") == NULL ||
		strstr(json_string_value(ca), "-----END CERTIFICATE-----") == NULL)
		return "ca_bundle: must be the PEM certificate(s) of the cluster's CA (the kubeconfig's certificate-authority-data, decoded)";
	if (!string_field(image) || strpbrk(json_string_value(image), " \t\n\"\\") != NULL)
		return "image: must name the mesh-sandboxd pod image (deploy/kubernetes/Dockerfile)";
	if (port && (!json_is_integer(port) || json_integer_value(port) < 1 ||
				 json_integer_value(port) > 65535))
		return "daemon_port: must be a port number";
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 100))
		return "request_timeout_ms: must be an integer of at least 100";
	if (ready && (!json_is_integer(ready) || json_integer_value(ready) < 1000))
		return "ready_timeout_ms: must be an integer of at least 1000";
	return check_scheduling(config);
}

/* The API server is always reached with the service account's token. */
static bool
k8s_needs_credential(json_t *config)
{
	return true;
}

/*
 * What a pod gives: the daemon's shell and its in-pod egress enforcement
 * (a daemon that cannot enforce refuses, so this fails closed), the pod's
 * requests/limits, ids the driver chooses, and background execs (the pod
 * runs the same daemon).  No hibernation (a deleted pod keeps nothing) and
 * no snapshots.  Acquire refines from the daemon.
 */
static void
k8s_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->shell = true;
	caps->resource_limits = true;
	caps->egress_control = true;
	caps->caller_chosen_id = true;
	caps->background = true;
}

/*--------------------------------------------------------------------------
 * Requests
 *--------------------------------------------------------------------------
 */

static long
config_int(const MeshBackend *be, const char *field, long fallback)
{
	json_t	   *value = json_object_get(be->config, field);

	return value ? (long) json_integer_value(value) : fallback;
}

/* The API server's base URL without a trailing slash. */
static char *
api_base(const MeshBackend *be)
{
	const char *url = json_string_value(json_object_get(be->config, "api_server"));
	size_t		len = strlen(url);

	return pnstrdup(url, len > 0 && url[len - 1] == '/' ? len - 1 : len);
}

static const char *
config_namespace(const MeshBackend *be)
{
	return json_string_value(json_object_get(be->config, "namespace"));
}

/* What every API request carries: the CA, the bearer token, the deadline. */
static void
k8s_secure(const MeshBackend *be, MeshHttpRequest *req)
{
	req->ca_pem = json_string_value(json_object_get(be->config, "ca_bundle"));
	if (be->credential)
		mesh_http_add_header(req, "Authorization: Bearer %s", be->credential);
}

/* Start a request to the API server on path (under /api/v1/namespaces/{ns}). */
static void
k8s_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method, const char *path)
{
	memset(req, 0, sizeof(*req));
	req->method = method;
	req->url = psprintf("%s/api/v1/namespaces/%s%s", api_base(be), config_namespace(be), path);
	req->timeout_ms = config_int(be, "request_timeout_ms", K8S_DEFAULT_REQUEST_TIMEOUT_MS);
	k8s_secure(be, req);
	mesh_http_add_header(req, "Accept: application/json");
}

/*
 * The key the pod's daemon accepts: HMAC-SHA256(token, ref), hex.  Derived,
 * never stored: the driver can recompute it for every call, and one pod's
 * key opens no other pod.
 */
static char *
daemon_key(const MeshBackend *be, const char *ref)
{
	ResourceOwner saved = CurrentResourceOwner;
	pg_hmac_ctx *ctx;
	uint8		mac[32];
	char	   *hex = palloc(sizeof(mac) * 2 + 1);
	const char *secret = be->credential ? be->credential : "";
	bool		ok;

	/* OpenSSL contexts are tracked by a resource owner; workers build requests outside one */
	if (saved == NULL)
		CurrentResourceOwner = ResourceOwnerCreate(NULL, "mesh workspace key");
	ctx = pg_hmac_create(PG_SHA256);
	ok = ctx != NULL && pg_hmac_init(ctx, (const uint8 *) secret, strlen(secret)) == 0 &&
		pg_hmac_update(ctx, (const uint8 *) ref, strlen(ref)) == 0 &&
		pg_hmac_final(ctx, mac, sizeof(mac)) == 0;
	pg_hmac_free(ctx);
	if (saved == NULL)
	{
		ResourceOwner mine = CurrentResourceOwner;

		CurrentResourceOwner = NULL;
		ResourceOwnerRelease(mine, RESOURCE_RELEASE_BEFORE_LOCKS, false, true);
		ResourceOwnerRelease(mine, RESOURCE_RELEASE_LOCKS, false, true);
		ResourceOwnerRelease(mine, RESOURCE_RELEASE_AFTER_LOCKS, false, true);
		ResourceOwnerDelete(mine);
	}
	if (!ok)
		elog(ERROR, "mesh: could not derive a workspace key");
	for (size_t i = 0; i < sizeof(mac); i++)
		sprintf(hex + 2 * i, "%02x", mac[i]);
	return hex;
}

/*
 * The sandboxd driver's view of the pod's daemon: its protocol at the pod's
 * proxy URL.  Its builders make the request; this one then travels to the
 * API server with the CA and token, and to the daemon with the derived key.
 */
static MeshBackend
pod_daemon(const MeshBackend *be, const char *ref)
{
	MeshBackend inner = *be;

	inner.driver = &mesh_sandboxd_driver;
	inner.credential = NULL;
	inner.config = json_pack("{s:s,s:I}", "url",
							 psprintf("%s/api/v1/namespaces/%s/pods/%s:%ld/proxy", api_base(be),
									  config_namespace(be), ref,
									  config_int(be, "daemon_port", K8S_DEFAULT_PORT)),
							 "request_timeout_ms",
							 (json_int_t) config_int(be, "request_timeout_ms", K8S_DEFAULT_REQUEST_TIMEOUT_MS));
	return inner;
}

/* Finish a request the sandboxd driver built for the pod's daemon. */
static void
pod_daemon_done(const MeshBackend *be, MeshBackend *inner, const char *ref, MeshHttpRequest *req)
{
	json_decref(inner->config);
	inner->config = NULL;
	k8s_secure(be, req);
	mesh_http_add_header(req, "X-Mesh-Sandboxd-Token: %s", daemon_key(be, ref));
}

/* The sandboxd driver, for parsing what the daemon answered (no config needed). */
static MeshBackend
daemon_parser(const MeshBackend *be)
{
	MeshBackend inner = *be;

	inner.driver = &mesh_sandboxd_driver;
	inner.config = NULL;
	inner.credential = NULL;
	return inner;
}

static K8sOp *
op_new(MeshOpState *st, const char *ref)
{
	K8sOp	   *op = palloc0(sizeof(K8sOp));

	op->ref = pstrdup(ref);
	st->data = op;
	return op;
}

/*--------------------------------------------------------------------------
 * Errors
 *--------------------------------------------------------------------------
 */

static MeshFailure
failure_for_status(long status)
{
	if (status == 404)
		return MESH_FAIL_NOT_FOUND;
	if (status == 409)
		return MESH_FAIL_NOT_RUNNING;
	if (status == 429)
		return MESH_FAIL_NO_RESOURCES;
	if (status == 401 || status == 403)
		return MESH_FAIL_UNAVAILABLE;
	if (status >= 400 && status < 500)
		return MESH_FAIL_BAD_REQUEST;
	return MESH_FAIL_UNAVAILABLE;
}

/*
 * An API server answer that is not 2xx, as an error an operator can act on:
 * the backend's name, what was being done, and the Status's own words.  The
 * token is never part of a request URL or an answer, so none can leak here.
 */
static void
api_error(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing, MeshError *err)
{
	json_t	   *doc = k8s_parse_object(resp->body, resp->body_len);
	K8sStatus	status = {resp->status, "", ""};

	if (doc)
		k8s_status_read(doc, &status);
	if (resp->status == 401)
		mesh_error_set(err, MESH_FAIL_UNAVAILABLE,
					   "backend \"%s\" (Kubernetes) refused the service-account token while trying to %s (HTTP 401 %s): "
					   "set a valid token with mesh.backend_set_credential",
					   be->name, doing, status.reason[0] ? status.reason : "Unauthorized");
	else if (resp->status == 403)
		mesh_error_set(err, MESH_FAIL_UNAVAILABLE,
					   "backend \"%s\" (Kubernetes): the service account may not %s in namespace \"%s\" (HTTP 403: %s); "
					   "bind it to the Role in deploy/kubernetes/",
					   be->name, doing, config_namespace(be), status.message);
	else
		mesh_error_set(err, failure_for_status(resp->status),
					   "backend \"%s\" (Kubernetes) could not %s: HTTP %ld %s%s%s", be->name, doing,
					   resp->status, status.reason, status.message[0] ? ": " : "", status.message);
	if (resp->status == 401)
		err->reason = pstrdup("the Kubernetes API server refused the service-account token (HTTP 401)");
	else if (resp->status == 403)
		err->reason = psprintf("the service account may not %s (HTTP 403)", doing);
	else
		err->reason = pstrdup(status.message[0] ? status.message : (status.reason[0] ? status.reason : "no reason given"));
	if (doc)
		json_decref(doc);
}

/* Whether the API server answered 2xx; otherwise err is set. */
static bool
api_ok(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing, MeshError *err)
{
	if (resp->transport_error)
		return mesh_http_error_from_json(resp, be->name, err);
	if (resp->status >= 200 && resp->status < 300)
		return true;
	api_error(be, resp, doing, err);
	return false;
}

/*
 * Whether an answer through the proxy came from the API server itself (a
 * Status: the pod is gone, not reachable, or the token was refused) rather
 * than from the daemon (which answers {"error": ...}).
 */
static bool
from_api_server(const MeshHttpResponse *resp, K8sStatus *status)
{
	json_t	   *doc;
	bool		is_status;

	if (resp->transport_error || (resp->status >= 200 && resp->status < 300))
		return false;
	doc = k8s_parse_object(resp->body, resp->body_len);
	is_status = doc && k8s_status_read(doc, status);
	if (doc)
		json_decref(doc);
	return is_status;
}

/*--------------------------------------------------------------------------
 * Acquire: create the pod, wait for Ready, then the daemon's own acquire
 *--------------------------------------------------------------------------
 */

/* One key-value object from the config (node selector), or NULL. */
static json_t *
config_copy(const MeshBackend *be, const char *field)
{
	json_t	   *value = json_object_get(be->config, field);

	return value ? json_deep_copy(value) : NULL;
}

/* The container's requests and limits for a size tier (Guaranteed QoS). */
static json_t *
tier_limits(MeshSize size)
{
	json_t	   *amounts = json_pack("{s:s,s:s}", "cpu", tier_resources[size].cpu,
									"memory", psprintf("%dMi", tier_resources[size].memory_mi));

	return json_pack("{s:O,s:o}", "requests", amounts, "limits", amounts);
}

/*
 * The Pod: labels for reconciliation (never parsed for meaning), the daemon
 * in single-workspace mode with its derived key, no service-account token
 * mounted (the workspace must not reach the API), the tier's resources, and
 * a readiness probe on the daemon's port.
 */
static json_t *
pod_manifest(const MeshBackend *be, const char *ref, MeshSize size, const char *install_id)
{
	long		port = config_int(be, "daemon_port", K8S_DEFAULT_PORT);
	json_t	   *pull = json_object_get(be->config, "image_pull_policy");
	json_t	   *runtime = json_object_get(be->config, "runtime_class");
	json_t	   *container;
	json_t	   *spec;

	container = json_pack("{s:s,s:s,s:[s,s],s:[{s:s,s:s},{s:s,s:s}],s:[{s:s,s:I,s:s}],s:o,"
						  "s:{s:{s:I},s:i,s:i}}",
						  "name", "sandboxd",
						  "image", json_string_value(json_object_get(be->config, "image")),
						  "args", "--single-workspace", ref,
						  "env", "name", "MESH_SANDBOXD_TOKEN", "value", daemon_key(be, ref),
						  "name", "MESH_SANDBOXD_PORT", "value", psprintf("%ld", port),
						  "ports", "name", "sandboxd", "containerPort", (json_int_t) port,
						  "protocol", "TCP",
						  "resources", tier_limits(size),
						  "readinessProbe", "tcpSocket", "port", (json_int_t) port,
						  "periodSeconds", 1, "failureThreshold", 3);
	if (pull)
		json_object_set(container, "imagePullPolicy", pull);
	spec = json_pack("{s:s,s:b,s:b,s:[o]}", "restartPolicy", "Never",
					 "automountServiceAccountToken", false, "enableServiceLinks", false,
					 "containers", container);
	if (runtime)
		json_object_set(spec, "runtimeClassName", runtime);
	if (json_object_get(be->config, "node_selector"))
		json_object_set_new(spec, "nodeSelector", config_copy(be, "node_selector"));
	if (json_object_get(be->config, "tolerations"))
		json_object_set_new(spec, "tolerations", config_copy(be, "tolerations"));
	return json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s,s:s}},s:o}",
					 "apiVersion", "v1", "kind", "Pod",
					 "metadata", "name", ref, "namespace", config_namespace(be),
					 "labels", K8S_LABEL_INSTALL, install_id, K8S_LABEL_BACKEND, be->name,
					 "app.kubernetes.io/managed-by", K8S_MANAGED_BY,
					 "spec", spec);
}

/* Delete a pod with a grace period in seconds (0: a failed pod, nothing to drain). */
static void
delete_request(const MeshBackend *be, const char *ref, int grace, MeshHttpRequest *req)
{
	k8s_begin(be, req, "DELETE", psprintf("/pods/%s", ref));
	mesh_http_json_body(req, json_pack("{s:s,s:s,s:i,s:s}", "apiVersion", "v1",
									   "kind", "DeleteOptions", "gracePeriodSeconds", grace,
									   "propagationPolicy", "Background"));
}

static void
create_request(const MeshBackend *be, K8sOp *op, MeshHttpRequest *req)
{
	op->phase = PH_CREATE;
	k8s_begin(be, req, "POST", "/pods?fieldValidation=Strict");
	mesh_http_json_body(req, pod_manifest(be, op->ref, op->spec.size, op->spec.install_id));
}

static bool
k8s_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	K8sOp	   *op;

	if (!mesh_acquire_without_snapshot(be, spec, err))
		return false;
	op = op_new(st, ref);
	op->spec.size = spec->size;
	op->spec.install_id = pstrdup(spec->install_id);
	op->spec.egress = spec->egress ? pstrdup(spec->egress) : NULL;
	op->last_state = "not created yet";
	op->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											   config_int(be, "ready_timeout_ms", K8S_DEFAULT_READY_TIMEOUT_MS));
	create_request(be, op, req);
	return true;
}

/*
 * A watch window on the pod: the API server sends the pod's current state
 * at once and every change for one second, then ends the answer.  So the
 * wait for Ready costs no polling, and at most a second after it.
 */
static void
watch_request(const MeshBackend *be, K8sOp *op, MeshHttpRequest *req)
{
	op->phase = PH_WATCH;
	k8s_begin(be, req, "GET",
			  psprintf("/pods?watch=true&timeoutSeconds=%d&fieldSelector=%s", K8S_WATCH_SECONDS,
					   mesh_url_encode(psprintf("metadata.name=%s", op->ref))));
	req->timeout_ms += K8S_WATCH_SECONDS * 1000;
}

/* The daemon's own acquire of the one workspace it serves: the sandboxd request. */
static bool
daemon_acquire_request(const MeshBackend *be, MeshOpState *st, K8sOp *op, MeshHttpRequest *req,
					   MeshError *err)
{
	MeshBackend inner = pod_daemon(be, op->ref);
	bool		built;

	op->phase = PH_DAEMON;
	built = mesh_sandboxd_driver.acquire_request(&inner, st, op->ref, &op->spec, req, err);
	pod_daemon_done(be, &inner, op->ref, req);
	return built;
}

/*
 * A pod that will not serve is deleted before the acquire fails with err,
 * so a failed acquire leaves nothing pending in the cluster (and the run's
 * next call starts afresh).
 */
static MeshStepResult
discard_pod(const MeshBackend *be, MeshOpState *st, K8sOp *op, MeshError *err)
{
	op->failure = *err;
	op->phase = PH_DISCARD;
	delete_request(be, op->ref, 0, &st->next);
	return MESH_STEP_NEXT;
}

static MeshStepResult
past_deadline(const MeshBackend *be, MeshOpState *st, K8sOp *op, MeshError *err)
{
	mesh_error_set(err, MESH_FAIL_UNAVAILABLE,
				   "backend \"%s\" (Kubernetes): pod \"%s\" did not become Ready within %ld ms (%s); "
				   "see kubectl describe pod -n %s %s",
				   be->name, op->ref, config_int(be, "ready_timeout_ms", K8S_DEFAULT_READY_TIMEOUT_MS),
				   op->last_state, config_namespace(be), op->ref);
	return discard_pod(be, st, op, err);
}

/* Not Ready yet: watch the pod, unless its time is up. */
static MeshStepResult
watch_or_give_up(const MeshBackend *be, MeshOpState *st, K8sOp *op, MeshError *err)
{
	if (GetCurrentTimestamp() >= op->deadline)
		return past_deadline(be, st, op, err);
	watch_request(be, op, &st->next);
	return MESH_STEP_NEXT;
}

/*
 * Go on from a pod's state: Ready -> the daemon's acquire; starting -> watch;
 * broken -> deleted, then a clear error; terminating (or replaced) -> watch,
 * then create.  Takes the pod's reference: every caller is done with it.
 */
static MeshStepResult
from_pod(const MeshBackend *be, MeshOpState *st, K8sOp *op, json_t *pod, MeshError *err)
{
	const char *why;
	MeshStepResult step = MESH_STEP_FAILED;

	switch (k8s_pod_state(pod, &why))
	{
		case K8S_POD_READY:
			step = daemon_acquire_request(be, st, op, &st->next, err) ? MESH_STEP_NEXT : MESH_STEP_FAILED;
			break;
		case K8S_POD_BROKEN:
			mesh_error_set(err, MESH_FAIL_UNAVAILABLE,
						   "backend \"%s\" (Kubernetes): pod \"%s\" will not start: %s; "
						   "see kubectl describe pod -n %s %s",
						   be->name, op->ref, why, config_namespace(be), op->ref);
			step = discard_pod(be, st, op, err);
			break;
		case K8S_POD_TERMINATING:
			op->recreate = true;
			op->last_state = "an earlier pod of the same name is still terminating";
			step = watch_or_give_up(be, st, op, err);
			break;
		case K8S_POD_STARTING:
			op->last_state = "still starting";
			step = watch_or_give_up(be, st, op, err);
			break;
	}
	json_decref(pod);
	return step;
}

/* A pod object from an answer, or a protocol error. */
static json_t *
pod_from(const MeshBackend *be, const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *pod = k8s_parse_object(resp->body, resp->body_len);

	if (pod == NULL || k8s_pod_name(pod) == NULL)
	{
		if (pod)
			json_decref(pod);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Kubernetes) answered with something that is not a Pod", be->name);
	}
	return pod;
}

/* POST answered: 201 -> wait; 409 AlreadyExists -> inspect the pod in the way. */
static MeshStepResult
created(const MeshBackend *be, MeshOpState *st, K8sOp *op, const MeshHttpResponse *resp,
		MeshError *err)
{
	json_t	   *pod;

	if (!resp->transport_error && resp->status == 409)
	{
		op->phase = PH_INSPECT;
		k8s_begin(be, &st->next, "GET", psprintf("/pods/%s", op->ref));
		return MESH_STEP_NEXT;
	}
	if (!api_ok(be, resp, "create a pod", err) || (pod = pod_from(be, resp, err)) == NULL)
		return MESH_STEP_FAILED;
	op->recreate = false;
	return from_pod(be, st, op, pod, err);
}

/*
 * A pod of this name exists (a crash left it, or an acquire's answer was
 * lost).  Ours and serving or starting: adopted.  Ours but failed: deleted
 * and made again.  Not ours: a conflict the operator must resolve.  Gone
 * meanwhile: created again.
 */
static MeshStepResult
inspected(const MeshBackend *be, MeshOpState *st, K8sOp *op, const MeshHttpResponse *resp,
		  MeshError *err)
{
	json_t	   *pod;
	const char *why;

	if (!resp->transport_error && resp->status == 404)
	{
		create_request(be, op, &st->next);
		return MESH_STEP_NEXT;
	}
	if (!api_ok(be, resp, "inspect an existing pod", err) || (pod = pod_from(be, resp, err)) == NULL)
		return MESH_STEP_FAILED;
	if (!k8s_pod_labelled(pod, op->spec.install_id, be->name))
	{
		json_decref(pod);
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Kubernetes): a pod named \"%s\" exists in namespace \"%s\" but was not made by this backend (labels differ); remove it",
					   be->name, op->ref, config_namespace(be));
		return MESH_STEP_FAILED;
	}
	if (k8s_pod_state(pod, &why) == K8S_POD_BROKEN)
	{
		json_decref(pod);
		op->phase = PH_REMOVE_STALE;
		delete_request(be, op->ref, 0, &st->next);
		return MESH_STEP_NEXT;
	}
	return from_pod(be, st, op, pod, err);
}

/* One watch window ended: its last event decides. */
static MeshStepResult
watched(const MeshBackend *be, MeshOpState *st, K8sOp *op, const MeshHttpResponse *resp,
		MeshError *err)
{
	bool		deleted;
	K8sStatus	error;
	json_t	   *pod;

	if (!api_ok(be, resp, "watch a pod", err))
		return MESH_STEP_FAILED;
	pod = k8s_watch_last(resp->body, resp->body_len, &deleted, &error);
	if (op->recreate && (deleted || pod == NULL))
	{
		if (pod)
			json_decref(pod);
		create_request(be, op, &st->next);
		return MESH_STEP_NEXT;
	}
	if (deleted || (pod == NULL && error.code == 0 && !op->recreate))
	{
		if (pod)
			json_decref(pod);
		mesh_error_set(err, MESH_FAIL_NOT_FOUND,
					   "backend \"%s\" (Kubernetes): pod \"%s\" was deleted while it started", be->name, op->ref);
		return MESH_STEP_FAILED;
	}
	if (pod == NULL)
		return watch_or_give_up(be, st, op, err);	/* an ERROR event (e.g. 410 Gone) */
	return from_pod(be, st, op, pod, err);
}

/* The daemon's answer: its capabilities, narrowed to what a pod can keep. */
static MeshStepResult
daemon_acquired(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				MeshCapabilities *caps, MeshError *err)
{
	MeshBackend inner = daemon_parser(be);
	K8sStatus	status;

	if (from_api_server(resp, &status))
	{
		api_error(be, resp, "reach the pod's daemon", err);
		return MESH_STEP_FAILED;
	}
	if (mesh_sandboxd_driver.acquire_response(&inner, st, resp, caps, err) != MESH_STEP_DONE)
		return MESH_STEP_FAILED;
	/* the pod's limits hold whatever the daemon could set inside it */
	caps->resource_limits = true;
	caps->hibernate = false;
	caps->snapshot = false;
	caps->caller_chosen_id = true;
	return MESH_STEP_DONE;
}

static MeshStepResult
k8s_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshCapabilities *caps, MeshError *err)
{
	K8sOp	   *op = st->data;

	switch (op->phase)
	{
		case PH_CREATE:
			return created(be, st, op, resp, err);
		case PH_INSPECT:
			return inspected(be, st, op, resp, err);
		case PH_REMOVE_STALE:
			if (!resp->transport_error && resp->status == 404)
			{
				create_request(be, op, &st->next);
				return MESH_STEP_NEXT;
			}
			if (!api_ok(be, resp, "remove a failed pod", err))
				return MESH_STEP_FAILED;
			op->recreate = true;
			watch_request(be, op, &st->next);
			return MESH_STEP_NEXT;
		case PH_WATCH:
			return watched(be, st, op, resp, err);
		case PH_DAEMON:
			return daemon_acquired(be, st, resp, caps, err);
		case PH_DISCARD:
			*err = op->failure;
			return MESH_STEP_FAILED;
	}
	return MESH_STEP_FAILED;
}

/*--------------------------------------------------------------------------
 * Exec, kill, background output, files: the sandboxd driver's requests,
 * through pods/proxy
 *--------------------------------------------------------------------------
 */

/* An API-server answer through the proxy (pod gone or unreachable) as an error. */
static bool
proxied_failure(const MeshBackend *be, const MeshHttpResponse *resp, MeshError *err)
{
	K8sStatus	status;

	if (!from_api_server(resp, &status))
		return false;
	api_error(be, resp, "reach the workspace's pod", err);
	return true;
}

static bool
k8s_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
				 const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_request(&inner, st, ref, spec, req, err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

static MeshStepResult
k8s_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshExecResult *result, MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_response(&inner, st, resp, result, err);
}

static bool
k8s_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *exec_key,
				 const char *signal, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.kill_request(&inner, st, ref, exec_key, signal, req,
														  err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* Whether the API server answered 404 through the proxy: the workspace's pod is gone. */
static bool
pod_gone(const MeshHttpResponse *resp)
{
	K8sStatus	status;

	return from_api_server(resp, &status) && status.code == 404;
}

/* A pod that is gone has nothing left to kill. */
static MeshStepResult
k8s_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (pod_gone(resp))
		return MESH_STEP_DONE;
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.kill_response(&inner, st, resp, err);
}

/* The daemon took the background exec (or the pod could not be reached). */
static MeshStepResult
k8s_exec_start_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_start_response(&inner, st, resp, err);
}

static bool
k8s_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const char *exec_key, const MeshOutputAsk *ask, MeshHttpRequest *req,
						MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_output_request(&inner, st, ref, exec_key, ask,
																 req, err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* A pod that is gone took its background execs with it: not running. */
static MeshStepResult
k8s_exec_output_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshExecProgress *progress, MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (pod_gone(resp))
	{
		mesh_error_set(err, MESH_FAIL_NOT_RUNNING,
					   "backend \"%s\" (Kubernetes): the workspace's pod is gone, and its background exec with it",
					   be->name);
		return MESH_STEP_FAILED;
	}
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_output_response(&inner, st, resp, progress, err);
}

static bool
k8s_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const char *exec_key, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_forget_request(&inner, st, ref, exec_key, req,
																 err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* A pod that is gone has no record left to forget. */
static MeshStepResult
k8s_exec_forget_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (pod_gone(resp))
		return MESH_STEP_DONE;
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_forget_response(&inner, st, resp, err);
}

static bool
k8s_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				 MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.read_request(&inner, st, ref, path, req, err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

static MeshStepResult
k8s_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  const char **data, size_t *len, MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.read_response(&inner, st, resp, data, len, err);
}

static bool
k8s_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				  int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.write_request(&inner, st, ref, path, mode, data, len,
														  req, err);

	pod_daemon_done(be, &inner, ref, req);
	return built;
}

static MeshStepResult
k8s_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   MeshError *err)
{
	MeshBackend inner = daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.write_response(&inner, st, resp, err);
}

/*--------------------------------------------------------------------------
 * Release and list
 *--------------------------------------------------------------------------
 */

/* Delete the pod: its workspace and files go with it (no hibernation). */
static bool
k8s_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	op_new(st, ref);
	delete_request(be, ref, 1, req);
	return true;
}

/* A pod that is already gone counts as released. */
static MeshStepResult
k8s_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshReleaseOutcome *outcome, MeshError *err)
{
	if ((resp->transport_error || resp->status != 404) && !api_ok(be, resp, "delete a pod", err))
		return MESH_STEP_FAILED;
	*outcome = MESH_RELEASE_DESTROYED;
	return MESH_STEP_DONE;
}

/*
 * This install's and this catalog entry's pods, by label selector: two
 * entries may share a namespace and each must list only what it made.
 */
static bool
k8s_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
				 MeshHttpRequest *req, MeshError *err)
{
	k8s_begin(be, req, "GET",
			  psprintf("/pods?labelSelector=%s",
					   mesh_url_encode(psprintf(K8S_LABEL_INSTALL "=%s," K8S_LABEL_BACKEND "=%s",
												install_id, be->name))));
	return true;
}

/*
 * Listed: pods that exist and are not on their way out.  A failed or
 * terminating pod holds no workspace any more, so its row is lost (the
 * reaper marks it failed) rather than taken for a hibernated sandbox.
 */
static MeshStepResult
k8s_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	json_t	   *list;
	json_t	   *pod;
	size_t		i;

	if (!api_ok(be, resp, "list pods", err))
		return MESH_STEP_FAILED;
	doc = k8s_parse_object(resp->body, resp->body_len);
	list = doc ? k8s_pod_list_items(doc) : NULL;
	if (list == NULL)
	{
		if (doc)
			json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Kubernetes) answered a pod list that is not a PodList", be->name);
		return MESH_STEP_FAILED;
	}
	*items = palloc0(sizeof(MeshListedWorkspace) * (json_array_size(list) + 1));
	*nitems = 0;
	json_array_foreach(list, i, pod)
	{
		const char *why;
		K8sPodState state = k8s_pod_state(pod, &why);

		if (k8s_pod_name(pod) == NULL || state == K8S_POD_BROKEN || state == K8S_POD_TERMINATING)
			continue;
		(*items)[*nitems].ref = pstrdup(k8s_pod_name(pod));
		(*items)[*nitems].running = state == K8S_POD_READY;
		(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

const MeshDriver mesh_kubernetes_driver = {
	.name = "kubernetes",
	.validate_config = k8s_validate_config,
	.needs_credential = k8s_needs_credential,
	.declared_capabilities = k8s_declared_capabilities,
	.workspace_ref = mesh_workspace_ref,
	.acquire_request = k8s_acquire_request,
	.acquire_response = k8s_acquire_response,
	.exec_request = k8s_exec_request,
	.exec_response = k8s_exec_response,
	.kill_request = k8s_kill_request,
	.kill_response = k8s_kill_response,
	.exec_start_response = k8s_exec_start_response,
	.exec_output_request = k8s_exec_output_request,
	.exec_output_response = k8s_exec_output_response,
	.exec_forget_request = k8s_exec_forget_request,
	.exec_forget_response = k8s_exec_forget_response,
	.read_request = k8s_read_request,
	.read_response = k8s_read_response,
	.write_request = k8s_write_request,
	.write_response = k8s_write_response,
	.release_request = k8s_release_request,
	.release_response = k8s_release_response,
	.list_request = k8s_list_request,
	.list_response = k8s_list_response,
};
