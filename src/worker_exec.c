/*-------------------------------------------------------------------------
 *
 * worker_exec.c
 *	  The mesh worker's exec operation.
 *
 * Runs a command in a ready workspace: the exec row first (made durable
 * while the request is on the wire), the remaining budget bounding the
 * timeout, secrets delivered as environment and redacted from what comes
 * back, egress denials told as a notice; and the kill of a command whose
 * caller stopped waiting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <math.h>

#include "credentials.h"
#include "exec_output.h"
#include "mesh_exec.h"
#include "worker.h"

/*
 * The remaining compute budget bounds this exec's timeout.  A run with
 * nothing left is stopped here: its workspace fails, with the reason.
 */
static bool
bound_by_budget(WorkerCall *call)
{
	double		remaining;
	ErrorData  *err;

	if (call->ws.budget_seconds < 0)
		return true;
	remaining = call->ws.budget_seconds - call->ws.compute_seconds;
	if (remaining <= 0)
	{
		if (!store_budget_exhausted(&call->ws, call->ws.compute_seconds, &err))
			FreeErrorData(err);
		reply_error(call, "53400", call->ws.status_reason, NULL,
					"Raise the budget with mesh.run_set_budget() or mesh.agent_set_budget(), or start a new run.");
		spawn_internal_release(call->run_id, call->ws.status_reason);
		return false;
	}
	if (call->spec.timeout_ms > remaining * 1000.0)
	{
		call->spec.timeout_ms = Max((long) ceil(remaining * 1000.0), 1);
		call->budget_bound = true;
	}
	return true;
}

/* Room for both streams as kept, base64-encoded, and the envelope. */
size_t
exec_response_limit(WorkerCall *call)
{
	return (size_t) call->spec.max_output_bytes * 3 + 64 * 1024;
}

/* What mesh_exec returns and mesh.execs keeps of each stream (mesh.max_output). */
static long
clamp_bytes(WorkerCall *call)
{
	return (long) json_integer_value(json_object_get(call->req, "max_output"));
}

static bool
list_has_variable(List *delivered)
{
	ListCell   *lc;

	foreach(lc, delivered)
		if (((MeshDelivered *) lfirst(lc))->variable)
			return true;
	return false;
}

/*
 * Secrets the run's grants deliver as environment ride in the exec request
 * body, over the caller's own variables; never in a URL, never in the row
 * (which keeps only the caller's variable names).
 */
static void
deliver_environment(WorkerCall *call)
{
	ListCell   *lc;
	json_t	   *env;

	if (!list_has_variable(call->delivered))
		return;
	env = call->spec.env ? json_deep_copy(call->spec.env) : json_pack("{}");
	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		if (d->variable)
			json_object_set_new(env, d->variable, json_string(d->value));
	}
	call->spec.env = env;
	json_object_set_new(call->req, "delivered_env", env);	/* freed with the request */
}

/*
 * Delivered values never come back out: redact them from the output and
 * from the egress denials.
 */
static void
redact_delivered(WorkerCall *call, MeshExecResult *result)
{
	ListCell   *lc;

	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		const char *label = d->variable ? d->variable : d->name;

		mesh_redact(&result->stdout_data, &result->stdout_len, d->value, label);
		mesh_redact(&result->stderr_data, &result->stderr_len, d->value, label);
		/* a denied host name can carry a value: events and NOTICEs get this text */
		if (result->egress_denials)
			result->egress_denials = mesh_redact_json(result->egress_denials, d->value, label);
		mesh_forget(d->value);
	}
}

/* A backend's message about a failed exec, without the run's secret values. */
static char *
redact_message(WorkerCall *call, char *message)
{
	ListCell   *lc;
	size_t		len = message ? strlen(message) : 0;

	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		if (message)
			mesh_redact(&message, &len, d->value, d->variable ? d->variable : d->name);
	}
	return message;
}

void
start_exec(WorkerCall *call)
{
	json_t	   *argv = json_object_get(call->req, "argv");
	const char **args = palloc(sizeof(char *) * (json_array_size(argv) + 1));
	MeshHttpRequest req;
	ErrorData  *err;
	size_t		i;
	json_t	   *item;

	if (!workspace_has_capability(call, "shell"))
	{
		reply_error(call, "0A000",
					psprintf("backend \"%s\" cannot run commands (it does not declare the shell capability)",
							 call->ws.backend_kind),
					NULL, "Pin this agent to a backend with shell, or use only file calls.");
		return;
	}
	json_array_foreach(argv, i, item)
		args[i] = json_string_value(item);
	call->spec.argv = args;
	call->spec.argc = (int) json_array_size(argv);
	call->spec.dir = json_string_value(json_object_get(call->req, "dir"));
	/* absent and JSON null both mean no variables of the caller's */
	call->spec.env = json_is_object(json_object_get(call->req, "env"))
		? json_object_get(call->req, "env") : NULL;
	if (json_is_true(json_object_get(call->req, "has_stdin")))
	{
		call->spec.stdin_data = call->blob;
		call->spec.stdin_len = call->blob_len;
	}
	call->spec.timeout_ms = (long) json_integer_value(json_object_get(call->req, "timeout_ms"));
	/* the backend keeps what is stored whole, and never less than is shown */
	call->spec.max_output_bytes = Max(mesh_exec_output_limit_bytes, clamp_bytes(call));
	if (!bound_by_budget(call))
		return;

	if (!store_exec_started(&call->ws, &call->spec, &call->exec_id, &call->exec_row_lsn,
							&call->delivered, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	deliver_environment(call);
	call->spec.exec_key = psprintf(INT64_FORMAT, call->exec_id);
	call->be.driver->exec_request(&call->be, begin_op(call), call->ws.external_ref, &call->spec, &req);
	call->op_started = GetCurrentTimestamp();
	start_transfer(call, &req, exec_response_limit(call));
	call->step = STEP_OPERATING;
	/* put the request on the wire, then make the exec row durable meanwhile */
	mesh_http_drive();
	mesh_flush_to(call->exec_row_lsn);
}

/*
 * The output as the command wrote it, redacted, is stored whole (up to
 * mesh.exec_output_limit); what is left in RESULT is the clamp people see.
 * A failure to store loses only the stored copy: the exec's end is still
 * recorded and returned.
 */
static void
keep_output(WorkerCall *call, MeshExecResult *result)
{
	MeshOutputStream out = {NULL, 0, result->stdout_total - (int64) result->stdout_len};
	MeshOutputStream errs = {NULL, 0, result->stderr_total - (int64) result->stderr_len};
	ErrorData  *err;

	redact_delivered(call, result);
	out.data = result->stdout_data;
	out.len = result->stdout_len;
	errs.data = result->stderr_data;
	errs.len = result->stderr_len;
	if (!store_exec_output(call->exec_id, &out, &errs, &err))
	{
		ereport(LOG,
				(errmsg("mesh: the output of exec " INT64_FORMAT " was not stored: %s",
						call->exec_id, err->message)));
		FreeErrorData(err);
	}
	result->truncated = false;
	exec_output_clamp(&result->stdout_data, &result->stdout_len, out.dropped + (int64) out.len,
					  clamp_bytes(call), &result->truncated);
	exec_output_clamp(&result->stderr_data, &result->stderr_len, errs.dropped + (int64) errs.len,
					  clamp_bytes(call), &result->truncated);
}

/*
 * The kernel's OOM kill comes first: a command that ran out of memory and
 * then hit its timeout still ran out of memory.
 */
static const char *
exec_status(const MeshExecResult *r)
{
	if (r->oom_killed)
		return "oom";
	if (r->timed_out)
		return "timeout";
	if (r->killed)
		return "cancelled";
	return "ok";
}

static double
seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / 1000000.0;
}

/* After a charge: a run at or over its budget stops, and its sandbox goes. */
static void
charge_budget(WorkerCall *call, double charged)
{
	ErrorData  *err;
	double		used = call->ws.compute_seconds + charged;

	call->ws.compute_seconds = used;
	if (call->ws.budget_seconds < 0 || used < call->ws.budget_seconds)
		return;
	if (!store_budget_exhausted(&call->ws, used, &err))
	{
		FreeErrorData(err);
		return;
	}
	spawn_internal_release(call->run_id, call->ws.status_reason);
}

/*
 * Tell the caller when the workspace's network policy refused connections
 * during the exec, so a connection error in the output is not mistaken for
 * a flaky network (the events hold every detail).
 */
static void
notice_egress_denials(WorkerCall *call, const char *denials_text)
{
	json_t	   *denials = denials_text ? json_loads(denials_text, 0, NULL) : NULL;
	StringInfoData msg;
	size_t		i;
	json_t	   *d;

	if (!json_is_array(denials) || json_array_size(denials) == 0)
	{
		if (denials)
			json_decref(denials);
		return;
	}
	initStringInfo(&msg);
	appendStringInfo(&msg, "mesh: the workspace network policy of run \"%s\" refused %zu connection(s):",
					 call->run_id, json_array_size(denials));
	json_array_foreach(denials, i, d)
	{
		if (i == 3)
		{
			appendStringInfoString(&msg, " ...");
			break;
		}
		appendStringInfo(&msg, "%s %s:%lld (%s)", i ? "," : "",
						 json_string_value(json_object_get(d, "host")),
						 (long long) json_integer_value(json_object_get(d, "port")),
						 json_string_value(json_object_get(d, "reason")));
	}
	appendStringInfoString(&msg, "; see mesh.run_network() and the egress_denied events");
	json_decref(denials);
	queue_message(call, json_pack("{s:s}", "notice", msg.data), NULL, 0);
}

void
finish_exec(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshExecResult result;
	MeshExecRecord rec = {0};
	MeshError	merr = {0};
	ErrorData  *err;

	MeshStepResult r = call->be.driver->exec_response(&call->be, &call->opstate, resp, &result, &merr);

	if (continue_op(call, r, exec_response_limit(call)))
		return;
	if (r == MESH_STEP_FAILED)
	{
		rec.status = "error";
		merr.message = redact_message(call, merr.message);
		merr.reason = redact_message(call, merr.reason);
		rec.error = merr.message;
		if (merr.failure == MESH_FAIL_NOT_RUNNING && !call->woke_once)
			rec.error = psprintf("%s; the workspace was woken and the command run again", merr.message);
		rec.charged_seconds = seconds_since(call->op_started);
		rec.charge_basis = "wall";
		if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
			FreeErrorData(err);
		if (!wake_and_retry(call, &merr))
			reply_backend_error(call, NULL, &merr);
		return;
	}
	keep_output(call, &result);
	result.stdout_data = mesh_sanitize_text(result.stdout_data, result.stdout_len);
	result.stderr_data = mesh_sanitize_text(result.stderr_data, result.stderr_len);
	rec.status = exec_status(&result);
	if (strcmp(rec.status, "timeout") == 0 && call->budget_bound)
		rec.status = "budget_exhausted";
	rec.result = &result;
	rec.charged_seconds = result.cpu_metered ? result.cpu_seconds : result.wall_seconds;
	/* stopped at the bound the budget set: what was left of it is spent, whatever the basis */
	if (strcmp(rec.status, "budget_exhausted") == 0)
		rec.charged_seconds = Max(rec.charged_seconds,
								  call->ws.budget_seconds - call->ws.compute_seconds);
	rec.charge_basis = result.cpu_metered ? "cpu" : "wall";
	if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	charge_budget(call, rec.charged_seconds);
	notice_egress_denials(call, result.egress_denials);
	if (strcmp(rec.status, "oom") == 0)
		climb_tier(call);
	reply_ok(call, json_pack("{s:i,s:s,s:s,s:s,s:b,s:I}",
							 "exit_code", result.exit_code,
							 "stdout", result.stdout_data,
							 "stderr", result.stderr_data,
							 "status", rec.status,
							 "truncated", result.truncated,
							 "exec_id", (json_int_t) call->exec_id),
			 NULL, 0);
}

/* The caller stopped waiting: kill the command's tree in the sandbox. */
void
cancel_exec(WorkerCall *call)
{
	MeshHttpRequest req;

	mesh_http_free(call->transfer);
	call->transfer = NULL;
	call->be.driver->kill_request(&call->be, begin_op(call), call->ws.external_ref,
								  call->spec.exec_key, &req);
	start_transfer(call, &req, worker_small_response_limit(call));
	call->step = STEP_KILLING;
}

void
finish_cancel(WorkerCall *call, const MeshHttpResponse *resp)
{
	MeshExecRecord rec = {0};
	ErrorData  *err;
	MeshError	merr = {0};

	if (continue_op(call, call->be.driver->kill_response(&call->be, &call->opstate, resp, &merr),
					worker_small_response_limit(call)))
		return;

	rec.status = "cancelled";
	rec.error = resp->transport_error
		? psprintf("cancelled by the caller; the kill request failed: %s", resp->transport_error)
		: "cancelled by the caller (interrupt or statement_timeout)";
	rec.charged_seconds = seconds_since(call->op_started);
	rec.charge_basis = "wall";
	if (!store_exec_finished(&call->ws, call->exec_id, &rec, &err))
		FreeErrorData(err);
	else
		charge_budget(call, rec.charged_seconds);
	call->step = STEP_FINISHED;
}
