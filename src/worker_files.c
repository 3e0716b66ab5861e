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

#include "settings.h"
#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_failures.h"
#include "worker_files.h"
#include "worker_reply.h"

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
	reply_error(call, failure_sqlerrcode(err->failure), message, err->message,
				failure_hint(err->failure));
}

/* A file of mesh.max_file_size fits; one byte more shows it is larger. */
static size_t
read_response_limit(WorkerCall *call)
{
	return (size_t) mesh_max_file_bytes + 1;
}

/*
 * A file's bytes for the caller, sent from the response body where they
 * lie, as the second part of the reply message.
 */
static void
reply_file(WorkerCall *call, const char *data, size_t len)
{
	StringInfo	head = begin_reply(call, sizeof(MeshReadReply));
	MeshReadReply r;

	r.content.off = (uint32) head->len;
	r.content.len = (int32) len;
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, data, len);
}

void
start_read(WorkerCall *call)
{
	MeshHttpRequest req;
	bool		built;

	built = call->be.driver->read_request(&call->be, begin_op(call), call->ws.external_ref,
										  mesh_msg_string(&call->msg, call->req.file.path),
										  &req, &call->run.err);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_read, &call->out.file,
			 read_response_limit(call), call->def->finish);
}

void
finish_read(WorkerCall *call)
{
	const char *path = mesh_msg_string(&call->msg, call->req.file.path);
	MeshError	merr = call->run.err;
	ErrorData  *err;
	const char *data = call->out.file.data;
	size_t		len = call->out.file.len;
	bool		ok = call->run.result == MESH_STEP_DONE;

	/* the workspace had stopped: it is being woken for a retry */
	if (!ok && wake_and_retry(call, &merr))
		return;
	if (!ok && call->run.resp.too_large)
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
		reply_file(call, data, len);
}

void
start_write(WorkerCall *call)
{
	MeshHttpRequest req;
	bool		built;

	built = call->be.driver->write_request(&call->be, begin_op(call), call->ws.external_ref,
										   mesh_msg_string(&call->msg, call->req.file.path),
										   call->req.file.mode,
										   call->blob, call->blob_len, &req, &call->run.err);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_write, NULL,
			 worker_small_response_limit(call), call->def->finish);
}

void
finish_write(WorkerCall *call)
{
	const char *path = mesh_msg_string(&call->msg, call->req.file.path);
	MeshError	merr = call->run.err;
	ErrorData  *err;
	bool		ok = call->run.result == MESH_STEP_DONE;

	/* the workspace had stopped: it is being woken for a retry */
	if (!ok && wake_and_retry(call, &merr))
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
		reply_done(call);
}
