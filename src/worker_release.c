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

#include "credentials.h"
#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_durable.h"
#include "worker_failures.h"
#include "worker_release.h"
#include "worker_reply.h"

/* The release is recorded (its background commands' rows ended with it): tell the caller. */
static void
reply_outcome(WorkerCall *call, const char *outcome)
{
	StringInfo	head = begin_reply(call, sizeof(MeshReleaseReply));
	MeshReleaseReply r;

	exec_ended_this_turn = true;	/* mesh_exec_wait's callers look again */
	r.outcome = mesh_msg_add_string(head, outcome);
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, NULL, 0);
}

/* The reaper releases idle workspaces with "idle": hibernate if possible. */
static bool
release_for_idleness(WorkerCall *call)
{
	return call->req.release.idle;
}

void
start_release(WorkerCall *call)
{
	const char *reason = mesh_msg_string(&call->msg, call->req.release.reason);
	MeshHttpRequest req;
	ErrorData  *err;
	bool		built;

	if (call->ws.status == MESH_WS_RELEASED || call->ws.release_outcome != NULL)
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
	if (!store_begin_release(&call->ws, reason, caller_role(call), &err))
	{
		reply_txn_error(call, err);
		return;
	}
	built = call->be.driver->release_request(&call->be, begin_op(call), call->ws.external_ref,
											 release_for_idleness(call) && call->ws.caps.hibernate,
											 &req, &call->run.err);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_release, &call->out.release,
			 worker_small_response_limit(call), call->def->finish);
}

static void finish_release_outcome(WorkerCall *call);

void
finish_release(WorkerCall *call)
{
	finish_release_outcome(call);
	if (call->ws.release_outcome != NULL)	/* released now (an idle hibernation is not) */
	{
		mesh_broker_forget_workspace(call->ws.external_ref);
		if (call->ws.has_grants)
			wake_broker();		/* it stops listening there and removes the rest */
	}
	wake_parked(call->run_id, NULL);
}

static void
finish_release_outcome(WorkerCall *call)
{
	MeshReleaseOutcome outcome = call->out.release;
	MeshError	merr = call->run.err;
	ErrorData  *err;
	const char *text;

	if (call->run.result == MESH_STEP_FAILED)
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
		reply_error(call, failure_sqlerrcode(merr.failure),
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
