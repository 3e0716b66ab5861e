/*-------------------------------------------------------------------------
 *
 * kubernetes_api.c
 *	  What the Kubernetes driver sends and reads of the API server: requests
 *	  with the CA and the bearer token, the pod daemon's derived key and
 *	  proxy view, and the API server's errors.
 *
 * kubernetes.c, kubernetes_pod.c and kubernetes_proxy.c build their
 * requests and read their answers through these helpers
 * (kubernetes_api.h), so the token travels one way: only in the
 * Authorization header.  Pure request builders and response parsers: no
 * I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "common/hmac.h"
#include "utils/resowner.h"

#include "backends/backend.h"
#include "backends/kubernetes_api.h"

#define K8S_DEFAULT_REQUEST_TIMEOUT_MS 30000

/*--------------------------------------------------------------------------
 * Requests
 *--------------------------------------------------------------------------
 */

/* An integer field of the config, or FALLBACK when it is not set. */
long
k8s_config_int(const MeshBackend *be, const char *field, long fallback)
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

/* The namespace every pod of this backend lives in. */
const char *
k8s_config_namespace(const MeshBackend *be)
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
void
k8s_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method, const char *path)
{
	memset(req, 0, sizeof(*req));
	req->method = method;
	req->url = psprintf("%s/api/v1/namespaces/%s%s", api_base(be), k8s_config_namespace(be), path);
	req->timeout_ms = k8s_config_int(be, "request_timeout_ms", K8S_DEFAULT_REQUEST_TIMEOUT_MS);
	k8s_secure(be, req);
	mesh_http_add_header(req, "Accept: application/json");
}

/*
 * The key the pod's daemon accepts: HMAC-SHA256(token, ref), hex.  Derived,
 * never stored: the driver can recompute it for every call, and one pod's
 * key opens no other pod.
 */
char *
k8s_daemon_key(const MeshBackend *be, const char *ref)
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
MeshBackend
k8s_pod_daemon(const MeshBackend *be, const char *ref)
{
	MeshBackend inner = *be;

	inner.driver = &mesh_sandboxd_driver;
	inner.credential = NULL;
	inner.config = json_pack("{s:s,s:I}", "url",
							 psprintf("%s/api/v1/namespaces/%s/pods/%s:%ld/proxy", api_base(be),
									  k8s_config_namespace(be), ref,
									  k8s_config_int(be, "daemon_port", K8S_DEFAULT_PORT)),
							 "request_timeout_ms",
							 (json_int_t) k8s_config_int(be, "request_timeout_ms", K8S_DEFAULT_REQUEST_TIMEOUT_MS));
	return inner;
}

/* Finish a request the sandboxd driver built for the pod's daemon. */
void
k8s_pod_daemon_done(const MeshBackend *be, MeshBackend *inner, const char *ref, MeshHttpRequest *req)
{
	json_decref(inner->config);
	inner->config = NULL;
	k8s_secure(be, req);
	mesh_http_add_header(req, "X-Mesh-Sandboxd-Token: %s", k8s_daemon_key(be, ref));
}

/* The sandboxd driver, for parsing what the daemon answered (no config needed). */
MeshBackend
k8s_daemon_parser(const MeshBackend *be)
{
	MeshBackend inner = *be;

	inner.driver = &mesh_sandboxd_driver;
	inner.config = NULL;
	inner.credential = NULL;
	return inner;
}

/*--------------------------------------------------------------------------
 * Errors
 *--------------------------------------------------------------------------
 */

/*
 * An API server answer that is not 2xx, as an error an operator can act on:
 * the backend's name, what was being done, and the Status's own words.  The
 * token is never part of a request URL or an answer, so none can leak here.
 */
void
k8s_api_error(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing, MeshError *err)
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
					   be->name, doing, k8s_config_namespace(be), status.message);
	else
		mesh_error_set(err, mesh_failure_for_http_status(resp->status),
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
bool
k8s_api_ok(const MeshBackend *be, const MeshHttpResponse *resp, const char *doing, MeshError *err)
{
	if (resp->transport_error)
		return mesh_http_error_from_json(resp, be->name, err);
	if (resp->status >= 200 && resp->status < 300)
		return true;
	k8s_api_error(be, resp, doing, err);
	return false;
}

/*
 * Whether an answer through the proxy came from the API server itself (a
 * Status: the pod is gone, not reachable, or the token was refused) rather
 * than from the daemon (which answers {"error": ...}).
 */
bool
k8s_from_api_server(const MeshHttpResponse *resp, K8sStatus *status)
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
