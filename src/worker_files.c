/*-------------------------------------------------------------------------
 *
 * worker_files.c
 *	  The mesh worker's file operations: read and write.
 *
 * A file's bytes travel as the call's blob both ways, never inside the
 * JSON; a read's reply sends them from the response body where they lie.
 * Errors are told in terms of the path the caller gave.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "mesh_exec.h"
#include "worker.h"

/*
 * A file call failed: say it in terms of the path the caller gave, keeping
 * the backend's own words as detail.
 */
static void
reply_file_error(WorkerCall *call, const char *path, const MeshError *err)
{
	const char *message;

	switch (err->failure)
	{
		case MESH_FAIL_NOT_FOUND:
			message = psprintf("file \"%s\" does not exist in the workspace of run \"%s\"",
							   path, call->run_id);
			break;
		case MESH_FAIL_PATH_REFUSED:
			message = psprintf("path \"%s\" is refused in the workspace of run \"%s\": %s", path, call->run_id,
							   err->reason ? err->reason : "it is not a file inside the workspace");
			break;
		case MESH_FAIL_TOO_LARGE:
			message = psprintf("file \"%s\" is too large", path);
			break;
		case MESH_FAIL_PERMISSION:
			message = psprintf("file \"%s\" in the workspace of run \"%s\" is not accessible: %s",
							   path, call->run_id, err->reason ? err->reason : "permission denied");
			break;
		case MESH_FAIL_NAME_TOO_LONG:
			message = psprintf("path \"%.80s%s\" is too long: %s", path, strlen(path) > 80 ? "..." : "",
							   err->reason ? err->reason : "a name in it is over the filesystem's limit");
			break;
		default:
			reply_backend_error(call, NULL, err);
			return;
	}
	reply_error(call, failure_sqlstate(err->failure), message, err->message,
				failure_hint(err->failure));
}

/*
 * The file operation is not over yet: the driver asked for another request,
 * or the workspace had stopped and is being woken for a retry.
 */
static bool
op_continues(WorkerCall *call, MeshStepResult r, const MeshError *merr, size_t max_response)
{
	return continue_op(call, r, max_response) ||
		(r == MESH_STEP_FAILED && wake_and_retry(call, merr));
}

/* A file of mesh.max_file_size fits; one byte more shows it is larger. */
size_t
read_response_limit(WorkerCall *call)
{
	return (size_t) mesh_max_file_bytes + 1;
}

void
start_read(WorkerCall *call)
{
	MeshHttpRequest req;

	call->be.driver->read_request(&call->be, begin_op(call), call->ws.external_ref,
								  json_string_value(json_object_get(call->req, "path")), &req);
	start_transfer(call, &req, read_response_limit(call));
	call->step = STEP_OPERATING;
}

void
finish_read(WorkerCall *call, const MeshHttpResponse *resp)
{
	const char *path = json_string_value(json_object_get(call->req, "path"));
	MeshError	merr = {0};
	ErrorData  *err;
	const char *data = NULL;
	size_t		len = 0;
	MeshStepResult r = call->be.driver->read_response(&call->be, &call->opstate, resp, &data, &len, &merr);
	bool		ok = r == MESH_STEP_DONE;

	if (op_continues(call, r, &merr, read_response_limit(call)))
		return;
	if (!ok && resp->transport_error && resp->status == 0 &&
		strstr(resp->transport_error, "limit") != NULL)
		mesh_error_set(&merr, MESH_FAIL_TOO_LARGE, "file \"%s\" is larger than mesh.max_file_size (%d bytes)",
					   path, mesh_max_file_bytes);
	if (!store_file_event(&call->ws, "file_read", path, ok ? (int64) len : 0,
						  ok ? NULL : merr.message, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!ok)
		reply_file_error(call, path, &merr);
	else
		reply_ok(call, json_pack("{s:b}", "ok", 1), data, len);
}

void
start_write(WorkerCall *call)
{
	MeshHttpRequest req;

	call->be.driver->write_request(&call->be, begin_op(call), call->ws.external_ref,
								   json_string_value(json_object_get(call->req, "path")),
								   (int) json_integer_value(json_object_get(call->req, "mode")),
								   call->blob, call->blob_len, &req);
	start_transfer(call, &req, worker_small_response_limit(call));
	call->step = STEP_OPERATING;
}

void
finish_write(WorkerCall *call, const MeshHttpResponse *resp)
{
	const char *path = json_string_value(json_object_get(call->req, "path"));
	MeshError	merr = {0};
	ErrorData  *err;
	MeshStepResult r = call->be.driver->write_response(&call->be, &call->opstate, resp, &merr);
	bool		ok = r == MESH_STEP_DONE;

	if (op_continues(call, r, &merr, worker_small_response_limit(call)))
		return;
	if (!store_file_event(&call->ws, "file_write", path, (int64) call->blob_len,
						  ok ? NULL : merr.message, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!ok)
		reply_file_error(call, path, &merr);
	else
		reply_ok(call, json_pack("{s:b}", "ok", 1), NULL, 0);
}
