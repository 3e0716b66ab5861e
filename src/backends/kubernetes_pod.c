/*-------------------------------------------------------------------------
 *
 * kubernetes_pod.c
 *	  The life of a workspace's pod: create it, wait for Ready, adopt or
 *	  replace one a crash left behind, delete it at release, and list this
 *	  backend's pods for the reaper.
 *
 * Acquire is a state machine over the API server's answers: POST the pod,
 * watch it in windows of one second until it is Ready (no polling), then
 * the daemon's own acquire through the proxy.  A pod that will not serve
 * is deleted before the acquire fails, so a failure leaves nothing
 * pending in the cluster.  Pure request builders and response parsers:
 * no I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "utils/timestamp.h"

#include "backends/backend.h"
#include "backends/kubernetes_api.h"

#define K8S_DEFAULT_READY_TIMEOUT_MS 120000
#define K8S_WATCH_SECONDS 1
#define K8S_DAEMON_OVERHEAD_MI 128	/* memory of the daemon beside the workspace */
#define K8S_MANAGED_BY "mesh-exec"
#define K8S_DAEMON_UID 10001		/* the image's mesh-sandboxd user (deploy/kubernetes/Dockerfile) */
#define K8S_SECCOMP_PROFILE "mesh-sandboxd.json"	/* deploy/kubernetes/seccomp/, on each node */

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

/* The state of a new operation on pod REF, in st->data. */
static K8sOp *
op_new(MeshOpState *st, const char *ref)
{
	K8sOp	   *op = palloc0(sizeof(K8sOp));

	op->ref = pstrdup(ref);
	st->data = op;
	return op;
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
 * The container's security context: no privilege escalation, no
 * capabilities, and /proc unmasked.  bubblewrap mounts a fresh /proc for
 * each sandbox's pid namespace, which the kernel refuses while parts of the
 * container's /proc are masked; unmasked is allowed only in the pod's own
 * user namespace (hostUsers false), where /proc/sys and the rest stay
 * owned by the node's root.  deploy/kubernetes/namespace.yaml says why.
 */
static json_t *
container_security(void)
{
	return json_pack("{s:b,s:b,s:{s:[s]},s:s}",
					 "allowPrivilegeEscalation", false, "privileged", false,
					 "capabilities", "drop", "ALL", "procMount", "Unmasked");
}

/*
 * The pod's security context: a non-root daemon, and the seccomp profile
 * that lets bubblewrap make namespaces and mounts (the runtime's default
 * refuses them) while refusing the rest of the kernel surface the daemon's
 * own filter refuses (deploy/kubernetes/seccomp/mesh-sandboxd.json).  On
 * nodes with AppArmor, whose default profile denies mounts, the config's
 * "apparmor_profile" names a Localhost profile that allows them.
 */
static json_t *
pod_security(const MeshBackend *be)
{
	json_t	   *apparmor = json_object_get(be->config, "apparmor_profile");
	json_t	   *security = json_pack("{s:b,s:i,s:i,s:{s:s,s:s}}",
									 "runAsNonRoot", true, "runAsUser", K8S_DAEMON_UID,
									 "runAsGroup", K8S_DAEMON_UID, "seccompProfile", "type", "Localhost",
									 "localhostProfile", K8S_SECCOMP_PROFILE);

	if (apparmor)
		json_object_set_new(security, "appArmorProfile",
							json_pack("{s:s,s:O}", "type", "Localhost", "localhostProfile", apparmor));
	return security;
}

/*
 * The Pod: labels for reconciliation (never parsed for meaning), the daemon
 * in single-workspace mode with its derived key, no service-account token
 * mounted (the workspace must not reach the API), the tier's resources, a
 * readiness probe on the daemon's port, and the shape the sandbox
 * namespace admits (Pod Security "restricted" and the ValidatingAdmission-
 * Policy of deploy/kubernetes/pod-policy.yaml): its own user namespace,
 * non-root, no capabilities.
 */
static json_t *
pod_manifest(const MeshBackend *be, const char *ref, MeshSize size, const char *install_id)
{
	long		port = k8s_config_int(be, "daemon_port", K8S_DEFAULT_PORT);
	json_t	   *pull = json_object_get(be->config, "image_pull_policy");
	json_t	   *runtime = json_object_get(be->config, "runtime_class");
	json_t	   *container;
	json_t	   *spec;

	container = json_pack("{s:s,s:s,s:[s,s],s:[{s:s,s:s},{s:s,s:s}],s:[{s:s,s:I,s:s}],s:o,"
						  "s:{s:{s:I},s:i,s:i},s:o}",
						  "name", "sandboxd",
						  "image", json_string_value(json_object_get(be->config, "image")),
						  "args", "--single-workspace", ref,
						  "env", "name", "MESH_SANDBOXD_TOKEN", "value", k8s_daemon_key(be, ref),
						  "name", "MESH_SANDBOXD_PORT", "value", psprintf("%ld", port),
						  "ports", "name", "sandboxd", "containerPort", (json_int_t) port,
						  "protocol", "TCP",
						  "resources", tier_limits(size),
						  "readinessProbe", "tcpSocket", "port", (json_int_t) port,
						  "periodSeconds", 1, "failureThreshold", 3,
						  "securityContext", container_security());
	if (pull)
		json_object_set(container, "imagePullPolicy", pull);
	spec = json_pack("{s:s,s:b,s:b,s:b,s:o,s:[o]}", "restartPolicy", "Never",
					 "automountServiceAccountToken", false, "enableServiceLinks", false,
					 "hostUsers", false, "securityContext", pod_security(be),
					 "containers", container);
	if (runtime)
		json_object_set(spec, "runtimeClassName", runtime);
	if (json_object_get(be->config, "node_selector"))
		json_object_set_new(spec, "nodeSelector", config_copy(be, "node_selector"));
	if (json_object_get(be->config, "tolerations"))
		json_object_set_new(spec, "tolerations", config_copy(be, "tolerations"));
	return json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s,s:s}},s:o}",
					 "apiVersion", "v1", "kind", "Pod",
					 "metadata", "name", ref, "namespace", k8s_config_namespace(be),
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

bool
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
											   k8s_config_int(be, "ready_timeout_ms", K8S_DEFAULT_READY_TIMEOUT_MS));
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
	MeshBackend inner = k8s_pod_daemon(be, op->ref);
	bool		built;

	op->phase = PH_DAEMON;
	built = mesh_sandboxd_driver.acquire_request(&inner, st, op->ref, &op->spec, req, err);
	k8s_pod_daemon_done(be, &inner, op->ref, req);
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
				   be->name, op->ref, k8s_config_int(be, "ready_timeout_ms", K8S_DEFAULT_READY_TIMEOUT_MS),
				   op->last_state, k8s_config_namespace(be), op->ref);
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
						   be->name, op->ref, why, k8s_config_namespace(be), op->ref);
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
	if (!k8s_api_ok(be, resp, "create a pod", err) || (pod = pod_from(be, resp, err)) == NULL)
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
	if (!k8s_api_ok(be, resp, "inspect an existing pod", err) || (pod = pod_from(be, resp, err)) == NULL)
		return MESH_STEP_FAILED;
	if (!k8s_pod_labelled(pod, op->spec.install_id, be->name))
	{
		json_decref(pod);
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Kubernetes): a pod named \"%s\" exists in namespace \"%s\" but was not made by this backend (labels differ); remove it",
					   be->name, op->ref, k8s_config_namespace(be));
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

	if (!k8s_api_ok(be, resp, "watch a pod", err))
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
	MeshBackend inner = k8s_daemon_parser(be);
	K8sStatus	status;

	if (k8s_from_api_server(resp, &status))
	{
		k8s_api_error(be, resp, "reach the pod's daemon", err);
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

MeshStepResult
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
			if (!k8s_api_ok(be, resp, "remove a failed pod", err))
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
 * Release and list
 *--------------------------------------------------------------------------
 */

/* Delete the pod: its workspace and files go with it (no hibernation). */
bool
k8s_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	op_new(st, ref);
	delete_request(be, ref, 1, req);
	return true;
}

/* A pod that is already gone counts as released. */
MeshStepResult
k8s_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshReleaseOutcome *outcome, MeshError *err)
{
	if ((resp->transport_error || resp->status != 404) && !k8s_api_ok(be, resp, "delete a pod", err))
		return MESH_STEP_FAILED;
	*outcome = MESH_RELEASE_DESTROYED;
	return MESH_STEP_DONE;
}

/*
 * This install's and this catalog entry's pods, by label selector: two
 * entries may share a namespace and each must list only what it made.
 */
bool
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
MeshStepResult
k8s_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	json_t	   *list;
	json_t	   *pod;
	size_t		i;

	if (!k8s_api_ok(be, resp, "list pods", err))
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
