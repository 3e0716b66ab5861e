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
 *				"image_pull_policy", "apparmor_profile", "daemon_port" (7070),
 *				"request_timeout_ms", "ready_timeout_ms"
 * The credential (mesh.backend_set_credential) is a service-account bearer
 * token; it travels only in the Authorization header.  The daemon in a pod
 * accepts a key derived from it and the workspace (HMAC-SHA256), sent in
 * X-Mesh-Sandboxd-Token because the API server consumes Authorization.
 *
 * Pure request builders and response parsers: no I/O happens here.  This
 * file holds the driver's config, capabilities and vtable; the pod's life
 * (acquire, release, list) is in kubernetes_pod.c, the pass-throughs to
 * the pod's daemon (exec, kill, background execs, files) in
 * kubernetes_proxy.c, and what they send and read of the API server in
 * kubernetes_api.c (kubernetes_api.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/kubernetes_api.h"

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

/*
 * The name of a Localhost AppArmor profile loaded on the nodes: the runtime's
 * default profile denies the mounts bubblewrap makes (docs/kubernetes.md).
 */
static bool
apparmor_name(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > 253)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			  *p == '-' || *p == '_' || *p == '.' || *p == '/'))
			return false;
	return true;
}

/* The optional scheduling fields: runtime class, node selector, tolerations, pull policy. */
static const char *
check_scheduling(json_t *config)
{
	json_t	   *runtime = json_object_get(config, "runtime_class");
	json_t	   *selector = json_object_get(config, "node_selector");
	json_t	   *tolerations = json_object_get(config, "tolerations");
	json_t	   *pull = json_object_get(config, "image_pull_policy");
	json_t	   *apparmor = json_object_get(config, "apparmor_profile");
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
	if (apparmor && (!json_is_string(apparmor) || !apparmor_name(json_string_value(apparmor))))
		return "apparmor_profile: must name a Localhost AppArmor profile loaded on the nodes (letters, digits, '-', '_', '.', '/')";
	return NULL;
}

/* Name the first bad field, so the admin sees what to fix. */
static const char *
k8s_validate_config(json_t *config)
{
	static const char *const known[] = {
		"api_server", "namespace", "ca_bundle", "image", "runtime_class", "node_selector",
		"tolerations", "image_pull_policy", "apparmor_profile", "daemon_port", "request_timeout_ms",
		"ready_timeout_ms",
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
			return psprintf("%s: unknown field (expected api_server, namespace, ca_bundle, image, runtime_class, node_selector, tolerations, image_pull_policy, apparmor_profile, daemon_port, request_timeout_ms, ready_timeout_ms)", key);
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
	caps->extend_timeout = true;	/* the pod's daemon's extend call; refined at acquisition */
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
	.extend_request = k8s_extend_request,
	.extend_response = k8s_extend_response,
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
