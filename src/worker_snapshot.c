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

#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_reply.h"
#include "worker_snapshot.h"

/* Whether the run's backend can capture: its driver and its workspace say so. */
static bool
can_snapshot(WorkerCall *call)
{
	return call->ws.backend_kind != NULL &&
		(call->be.driver != NULL || mesh_backend_from_workspace(&call->ws, &call->be)) &&
		call->be.driver->snapshot_ref != NULL && call->ws.caps.snapshot;
}

/*
 * The capturing row first (refusals raised by its SQL function), then the
 * backend is asked to capture.
 */
void
start_snapshot(WorkerCall *call)
{
	MeshHttpRequest req;
	ErrorData  *err;
	char	   *snap_ref;
	bool		built;

	if (!store_snapshot_begin(&call->ws, can_snapshot(call) ? &call->be : NULL,
							  worker_install_id, &call->snapshot_id, &snap_ref, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	built = call->be.driver->snapshot_capture_request(&call->be, begin_op(call), snap_ref,
													  call->ws.external_ref, worker_install_id,
													  &req, &call->run.err);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_snapshot_capture, &call->out.snapshot,
			 worker_small_response_limit(call), call->def->finish);
}

/* The capture's driver run ended: the row becomes ready (and current) or failed. */
void
finish_snapshot(WorkerCall *call)
{
	bool		captured = call->run.result == MESH_STEP_DONE;
	MeshError	merr = call->run.err;
	ErrorData  *err;
	Datum		row;

	if (!store_snapshot_finish(call->snapshot_id, captured ? &call->out.snapshot : NULL,
							   captured ? NULL : merr.message, &row, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!captured)
	{
		/* a workspace the backend stopped (its daemon restarted) is woken, then captured */
		if (!wake_and_retry(call, &merr))
			reply_backend_error(call, "capturing the workspace", &merr);
		return;
	}
	reply_row(call, row);
}
