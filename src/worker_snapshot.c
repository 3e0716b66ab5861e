/*-------------------------------------------------------------------------
 *
 * worker_snapshot.c
 *	  The mesh worker's capture of a run's /workspace (mesh_snapshot).
 *
 * The snapshot's row is written (capturing, with the name its driver
 * chose) and committed before the backend is called; the backend's answer
 * makes it the project's current snapshot (the previous one retired in the
 * same transaction) or failed with the reason.  The run's commands keep
 * running meanwhile: the capture is a call of its own, never a state change
 * its other calls wait for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "worker.h"

/* Whether the run's backend can capture: its driver and its workspace say so. */
static bool
can_snapshot(WorkerCall *call)
{
	return call->ws.backend_kind != NULL &&
		(call->be.driver != NULL || mesh_backend_from_workspace(&call->ws, &call->be)) &&
		call->be.driver->snapshot_ref != NULL && workspace_has_capability(call, "snapshot");
}

void
start_snapshot(WorkerCall *call)
{
	MeshHttpRequest req;
	ErrorData  *err;
	char	   *snap_ref;

	if (!store_snapshot_begin(&call->ws, can_snapshot(call) ? &call->be : NULL,
							  worker_install_id, &call->snapshot_id, &snap_ref, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	call->be.driver->snapshot_capture_request(&call->be, begin_op(call), snap_ref,
											  call->ws.external_ref, worker_install_id, &req);
	start_transfer(call, &req, worker_small_response_limit(call));
	call->step = STEP_OPERATING;
}

void
finish_snapshot(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshSnapshotInfo info = {0};
	MeshError	merr = {0};
	ErrorData  *err;
	char	   *row_json;
	MeshStepResult r = call->be.driver->snapshot_capture_response(&call->be, &call->opstate, resp,
																  &info, &merr);

	if (continue_op(call, r, worker_small_response_limit(call)))
		return;
	if (!store_snapshot_finish(call->snapshot_id, r == MESH_STEP_DONE ? &info : NULL,
							   r == MESH_STEP_DONE ? NULL : merr.message, &row_json, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (r == MESH_STEP_FAILED)
	{
		/* a workspace the backend stopped (its daemon restarted) is woken, then captured */
		if (!wake_and_retry(call, &merr))
			reply_backend_error(call, "capturing the workspace", &merr);
		return;
	}
	reply_ok(call, json_pack("{s:s}", "row", row_json), NULL, 0);
}
