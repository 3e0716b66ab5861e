/*-------------------------------------------------------------------------
 *
 * kubernetes_api.h
 *	  What the Kubernetes driver's files share: the API server's requests
 *	  and errors, and the view of a pod's mesh-sandboxd.
 *
 * The driver is split so a reader finds each part by file name:
 * kubernetes.c (config, capabilities, the driver's vtable),
 * kubernetes_pod.c (the pod's life: create, wait for Ready, adopt or
 * replace, delete, list), kubernetes_proxy.c (exec, kill, background
 * execs and files: the sandboxd driver's requests through pods/proxy), and
 * kubernetes_api.c (what they all send and read).  Only those files
 * include this header; kubernetes.h stays the readers of API-server answers
 * that tests and fuzzers build alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_KUBERNETES_API_H
#define MESH_KUBERNETES_API_H

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/kubernetes.h"

#define K8S_DEFAULT_PORT 7070

extern const MeshDriver mesh_sandboxd_driver;

/* kubernetes_api.c: requests to the API server, and the pod's daemon through it */
/* an integer field of the config, or FALLBACK */
extern long k8s_config_int(const MeshBackend *be, const char *field, long fallback);
/* the namespace of this backend's pods */
extern const char *k8s_config_namespace(const MeshBackend *be);
/* start a request under /api/v1/namespaces/{ns}: CA, token, deadline */
extern void k8s_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method,
					  const char *path);
/* the key the pod's daemon accepts: HMAC-SHA256(token, ref), hex */
extern char *k8s_daemon_key(const MeshBackend *be, const char *ref);
/* the sandboxd driver's view of the pod's daemon, at its proxy URL */
extern MeshBackend k8s_pod_daemon(const MeshBackend *be, const char *ref);
/* finish a request built for the pod's daemon: config freed, CA, token, key */
extern void k8s_pod_daemon_done(const MeshBackend *be, MeshBackend *inner, const char *ref,
							MeshHttpRequest *req);
/* the sandboxd driver, to parse what the pod's daemon answered */
extern MeshBackend k8s_daemon_parser(const MeshBackend *be);

/* kubernetes_api.c: the API server's errors */
/* an API server answer that is not 2xx, as an error an operator can act on */
extern void k8s_api_error(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing,
					  MeshError *err);
/* whether the API server answered 2xx; otherwise err is set */
extern bool k8s_api_ok(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing,
				   MeshError *err);
/* whether an answer through the proxy came from the API server (a Status) */
extern bool k8s_from_api_server(const MeshHttpResponse *resp, K8sStatus *status);

/* kubernetes_pod.c: acquire, release, list */
extern bool k8s_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_acquire_response(const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp, MeshCapabilities *caps,
										   MeshError *err);
extern bool k8s_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								bool prefer_hibernate, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_release_response(const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp,
										   MeshReleaseOutcome *outcome, MeshError *err);
extern bool k8s_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
							 MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_list_response(const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp, MeshListedWorkspace **items,
										int *nitems, MeshError *err);

/* kubernetes_proxy.c: the sandboxd driver's operations, through pods/proxy */
extern bool k8s_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							 const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_exec_response(const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp, MeshExecResult *result,
										MeshError *err);
extern bool k8s_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							 const char *exec_key, const char *signal, MeshHttpRequest *req,
							 MeshError *err);
extern MeshStepResult k8s_kill_response(const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp, MeshError *err);
extern bool k8s_extend_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							   const char *exec_key, int64_t by_ms, MeshHttpRequest *req,
							   MeshError *err);
extern MeshStepResult k8s_extend_response(const MeshBackend *be, MeshOpState *st,
										  const MeshHttpResponse *resp, int64_t *timeout_ms,
										  MeshError *err);
extern MeshStepResult k8s_exec_start_response(const MeshBackend *be, MeshOpState *st,
											  const MeshHttpResponse *resp, MeshError *err);
extern bool k8s_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
									const char *exec_key, const MeshOutputAsk *ask,
									MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_exec_output_response(const MeshBackend *be, MeshOpState *st,
											   const MeshHttpResponse *resp,
											   MeshExecProgress *progress, MeshError *err);
extern bool k8s_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
									const char *exec_key, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_exec_forget_response(const MeshBackend *be, MeshOpState *st,
											   const MeshHttpResponse *resp, MeshError *err);
extern bool k8s_read_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							 const char *path, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_read_response(const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp, const char **data,
										size_t *len, MeshError *err);
extern bool k8s_write_request(const MeshBackend *be, MeshOpState *st, const char *ref,
							  const char *path, int mode, const char *data, size_t len,
							  MeshHttpRequest *req, MeshError *err);
extern MeshStepResult k8s_write_response(const MeshBackend *be, MeshOpState *st,
										 const MeshHttpResponse *resp, MeshError *err);

#endif							/* MESH_KUBERNETES_API_H */
