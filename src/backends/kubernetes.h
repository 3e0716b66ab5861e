/*-------------------------------------------------------------------------
 *
 * kubernetes.h
 *	  The Kubernetes driver's readers of API-server answers.
 *
 * kubernetes_parse.c reads what the API server sends (Pod, PodList, watch
 * events, Status) with jansson alone: no palloc, no ereport, no server
 * runtime.  So the readers of untrusted bytes can be fuzzed and unit-tested
 * against recorded API responses outside PostgreSQL (test/fuzz/,
 * test/kubernetes/), while the driver (kubernetes_pod.c, kubernetes_api.c)
 * turns their findings into requests and MeshErrors.  Every string returned points into the document passed
 * in, or is a static literal.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_KUBERNETES_H
#define MESH_KUBERNETES_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

/* Where a pod is on its way to serving its workspace. */
typedef enum K8sPodState
{
	K8S_POD_STARTING,			/* Pending, or Running but not Ready yet */
	K8S_POD_READY,				/* Running and its Ready condition is True */
	K8S_POD_BROKEN,				/* will not become Ready: Failed, Succeeded, or a
								 * container stuck on its image or config */
	K8S_POD_TERMINATING			/* deletion requested (deletionTimestamp set) */
} K8sPodState;

/* A Status object (kind "Status"), as the API server reports errors. */
typedef struct K8sStatus
{
	long		code;
	const char *reason;			/* e.g. "AlreadyExists"; "" when absent */
	const char *message;		/* "" when absent */
} K8sStatus;

extern json_t *k8s_parse_object(const char *body, size_t len);
extern bool k8s_status_read(json_t *doc, K8sStatus *status);
extern K8sPodState k8s_pod_state(json_t *pod, const char **why);
extern bool k8s_pod_labelled(json_t *pod, const char *install_id, const char *backend);
extern const char *k8s_pod_name(json_t *pod);
extern json_t *k8s_watch_last(const char *body, size_t len, bool *deleted, K8sStatus *error);
extern json_t *k8s_pod_list_items(json_t *doc);

#define K8S_LABEL_INSTALL "mesh.install"
#define K8S_LABEL_BACKEND "mesh.backend"

#endif							/* MESH_KUBERNETES_H */
