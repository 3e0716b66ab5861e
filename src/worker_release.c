/*-------------------------------------------------------------------------
 *
 * worker_release.c
 *	  The mesh worker's release operation.
 *
 * Releases a run's workspace for its caller, for the reaper (idle ones are
 * hibernated where the backend can) and for the worker itself (a run that
 * exhausted its budget, spawn_internal_release).  A release is a state
 * change of the run: its other calls wait until it ends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "credentials.h"
#include "worker.h"

static void
reply_outcome(WorkerCall *call, const char *outcome)
{
	reply_ok(call, json_pack("{s:s}", "outcome", outcome), NULL, 0);
}

/* The reaper releases idle workspaces with "idle": hibernate if possible. */
static bool
release_for_idleness(WorkerCall *call)
{
	return json_is_true(json_object_get(call->req, "idle"));
}

void
start_release(WorkerCall *call)
{
	const char *reason = json_string_value(json_object_get(call->req, "reason"));
	MeshHttpRequest req;
	ErrorData  *err;
	const char *status = call->ws.status;

	if (strcmp(status, "released") == 0 || call->ws.release_outcome != NULL)
	{
		reply_outcome(call, "already released");
		return;
	}
	if (call->ws.external_ref == NULL)
	{
		if (!store_released(&call->ws, "never materialized", reason, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, "never materialized");
		return;
	}
	if (!mesh_backend_from_workspace(&call->ws, &call->be) ||
		(call->be.driver->needs_credential(call->be.config) && call->be.credential == NULL))
	{
		call->ws.backend_found = false;
		if (!store_release_stuck(&call->ws,
								 psprintf("backend \"%s\" has no catalog entry or credential left to release it with",
										  call->ws.backend_kind),
								 false, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, "must be released by hand");
		return;
	}
	if (!store_begin_release(&call->ws, reason, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	call->be.driver->release_request(&call->be, begin_op(call), call->ws.external_ref,
									 release_for_idleness(call) && workspace_has_capability(call, "hibernate"),
									 &req);
	start_transfer(call, &req, worker_small_response_limit(call));
	call->step = STEP_OPERATING;
}

static void finish_release_outcome(WorkerCall *call, const MeshHttpResponse *resp);

void
finish_release(WorkerCall *call, const MeshHttpResponse *resp)
{
	finish_release_outcome(call, resp);
	if (call->step == STEP_OPERATING)
		return;
	if (call->ws.release_outcome != NULL)	/* released now (an idle hibernation is not) */
	{
		mesh_broker_forget_workspace(call->ws.external_ref);
		if (call->ws.has_grants)
			wake_broker();		/* it stops listening there and removes the rest */
	}
	wake_parked(call->run_id, NULL);
}

static void
finish_release_outcome(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshReleaseOutcome outcome;
	MeshError	merr = {0};
	ErrorData  *err;
	const char *text;

	MeshStepResult r = call->be.driver->release_response(&call->be, &call->opstate, resp, &outcome, &merr);

	if (continue_op(call, r, worker_small_response_limit(call)))
		return;
	if (r == MESH_STEP_FAILED)
	{
		if (merr.failure == MESH_FAIL_NOT_FOUND)
		{
			/* the backend no longer holds it: nothing is left to release */
			if (!store_released(&call->ws, "destroyed", "the backend no longer had the workspace", &err))
				reply_txn_error(call, err);
			else
				reply_outcome(call, "destroyed");
			return;
		}
		if (!store_release_stuck(&call->ws, merr.message,
								 merr.failure == MESH_FAIL_RELEASE_INCOMPLETE, &err))
			FreeErrorData(err);
		reply_error(call, failure_sqlstate(merr.failure),
					psprintf("could not release the workspace of run \"%s\": %s", call->run_id,
							 merr.reason ? merr.reason : merr.message),
					psprintf("%s%s%s", merr.reason ? merr.message : "", merr.reason ? ". " : "",
							 merr.failure == MESH_FAIL_RELEASE_INCOMPLETE
							 ? "The workspace stays recorded as releasing; the reaper retries at its next sweep (mesh.sweep() runs one now), and mesh_release can be called again."
							 : "The workspace stays recorded as releasing; mesh_release can be called again."),
					failure_hint(merr.failure));
		return;
	}
	text = outcome == MESH_RELEASE_HIBERNATED ? "hibernated" : "destroyed";
	if (outcome == MESH_RELEASE_HIBERNATED && release_for_idleness(call))
	{
		/* the run lives on: its next call wakes the workspace, files intact */
		if (!store_idle_hibernated(&call->ws, &err))
			reply_txn_error(call, err);
		else
			reply_outcome(call, text);
		return;
	}
	if (!store_released(&call->ws, text, NULL, &err))
		reply_txn_error(call, err);
	else
		reply_outcome(call, text);
}
