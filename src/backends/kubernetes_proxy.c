/*-------------------------------------------------------------------------
 *
 * kubernetes_proxy.c
 *	  The Kubernetes driver's exec, kill, background execs and files: the
 *	  sandboxd driver's own requests, sent through the API server's
 *	  pods/{name}:{port}/proxy subresource to the pod's mesh-sandboxd.
 *
 * Each request is built by the sandboxd driver for the pod's daemon
 * (k8s_pod_daemon), then carries the CA, the token and the workspace's derived
 * key (k8s_pod_daemon_done).  An answer that came from the API server rather
 * than from the daemon (the pod is gone or unreachable) is an error in
 * the API server's words; anything else is the sandboxd driver's to read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/kubernetes_api.h"

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

	if (!k8s_from_api_server(resp, &status))
		return false;
	k8s_api_error(be, resp, "reach the workspace's pod", err);
	return true;
}

bool
k8s_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
				 const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_request(&inner, st, ref, spec, req, err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

MeshStepResult
k8s_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshExecResult *result, MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_response(&inner, st, resp, result, err);
}

bool
k8s_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *exec_key,
				 const char *signal, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.kill_request(&inner, st, ref, exec_key, signal, req,
														  err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* Whether the API server answered 404 through the proxy: the workspace's pod is gone. */
static bool
pod_gone(const MeshHttpResponse *resp)
{
	K8sStatus	status;

	return k8s_from_api_server(resp, &status) && status.code == 404;
}

/* A pod that is gone has nothing left to kill. */
MeshStepResult
k8s_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (pod_gone(resp))
		return MESH_STEP_DONE;
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.kill_response(&inner, st, resp, err);
}

/* The pod's daemon moves the exec's deadline (a daemon that does not declares no extend_timeout). */
bool
k8s_extend_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *exec_key,
				   int64_t by_ms, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.extend_request(&inner, st, ref, exec_key, by_ms, req,
															err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* A pod that is gone runs no exec any more. */
MeshStepResult
k8s_extend_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					int64_t *timeout_ms, MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	*timeout_ms = -1;
	if (pod_gone(resp))
	{
		mesh_error_set(err, MESH_FAIL_NOT_FOUND, "backend \"%s\": the workspace's pod is gone",
					   be->name);
		return MESH_STEP_FAILED;
	}
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.extend_response(&inner, st, resp, timeout_ms, err);
}

/* The daemon took the background exec (or the pod could not be reached). */
MeshStepResult
k8s_exec_start_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_start_response(&inner, st, resp, err);
}

bool
k8s_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const char *exec_key, const MeshOutputAsk *ask, MeshHttpRequest *req,
						MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_output_request(&inner, st, ref, exec_key, ask,
																 req, err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* A pod that is gone took its background execs with it: not running. */
MeshStepResult
k8s_exec_output_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshExecProgress *progress, MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

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

bool
k8s_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						const char *exec_key, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.exec_forget_request(&inner, st, ref, exec_key, req,
																 err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

/* A pod that is gone has no record left to forget. */
MeshStepResult
k8s_exec_forget_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (pod_gone(resp))
		return MESH_STEP_DONE;
	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.exec_forget_response(&inner, st, resp, err);
}

bool
k8s_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				 MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.read_request(&inner, st, ref, path, req, err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

MeshStepResult
k8s_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  const char **data, size_t *len, MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.read_response(&inner, st, resp, data, len, err);
}

bool
k8s_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
				  int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	MeshBackend inner = k8s_pod_daemon(be, ref);
	bool		built = mesh_sandboxd_driver.write_request(&inner, st, ref, path, mode, data, len,
														  req, err);

	k8s_pod_daemon_done(be, &inner, ref, req);
	return built;
}

MeshStepResult
k8s_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   MeshError *err)
{
	MeshBackend inner = k8s_daemon_parser(be);

	if (proxied_failure(be, resp, err))
		return MESH_STEP_FAILED;
	return mesh_sandboxd_driver.write_response(&inner, st, resp, err);
}
