/*-------------------------------------------------------------------------
 *
 * worker_exec.c
 *	  The mesh worker's exec operation.
 *
 * Runs a command in a ready workspace: the exec row first (made durable
 * before the request leaves, by the loop's one flush per turn), the
 * remaining budget bounding the timeout, secrets delivered as environment
 * and redacted from what comes back, egress denials told as a notice; and
 * the kill of a command whose caller stopped waiting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <math.h>

#include "credentials.h"
#include "exec_output.h"
#include "settings.h"
#include "worker_acquire.h"
#include "worker_call.h"
#include "worker_command.h"
#include "worker_durable.h"
#include "worker_exec.h"
#include "worker_failures.h"
#include "worker_reply.h"

static void keep_exec_row(WorkerCall *call, XLogRecPtr lsn);

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
		reply_error(call, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, call->ws.status_reason, NULL,
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

/* Room for both streams as kept (base64-encoded by a backend that must), and the envelope. */
static size_t
exec_response_limit(WorkerCall *call)
{
	return (size_t) call->spec.max_output_bytes * 3 + 64 * 1024;
}

/* What mesh_exec returns and mesh.execs keeps of each stream (mesh.max_output). */
static long
clamp_bytes(WorkerCall *call)
{
	return (long) call->req.exec.max_output;
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
	/* the row already holds the caller's variable names: the secrets join them now */
	env = call->env ? call->env : json_object();
	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		if (d->variable)
			json_object_set_new(env, d->variable, json_string(d->value));
	}
	call->spec.env = call->env = env;	/* freed with the call */
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

/*
 * The command as the driver takes it, from the typed request: argv, and the
 * caller's variables as the JSON object the backends' APIs want.
 */
static void
exec_spec_from_request(WorkerCall *call)
{
	const MeshExecRequest *r = &call->req.exec;
	const char **args = palloc(sizeof(char *) * (r->argc + 1));

	for (int i = 0; i < r->argc; i++)
		args[i] = mesh_msg_string(&call->msg, mesh_msg_list_item(&call->msg, r->argv, i));
	args[r->argc] = NULL;
	call->spec.argv = args;
	call->spec.argc = r->argc;
	call->spec.dir = mesh_msg_string(&call->msg, r->dir);
	if (r->env.len >= 0)
	{
		call->env = json_object();
		for (int i = 0; i < r->nenv; i++)
			json_object_set_new(call->env,
								mesh_msg_string(&call->msg, mesh_msg_list_item(&call->msg, r->env, 2 * i)),
								json_string(mesh_msg_string(&call->msg,
															mesh_msg_list_item(&call->msg, r->env, 2 * i + 1))));
	}
	call->spec.env = call->env;
	if (r->has_stdin)
	{
		call->spec.stdin_data = call->blob;
		call->spec.stdin_len = call->blob_len;
	}
	call->spec.timeout_ms = (long) r->timeout_ms;
	call->spec.background = call->op == MESH_OP_EXEC_START;
	call->spec.eval = r->eval;
	call->spec.egress = call->ws.egress;
	/* the backend keeps what is stored whole, and never less than is shown */
	call->spec.max_output_bytes = Max(mesh_exec_output_limit_bytes, r->max_output);
}

/*
 * In the transaction that loads the run (store_load_then): a command that
 * can start on the workspace as loaded (ready, its backend usable, its run
 * token valid, the shell capability, budget left) has its exec row written
 * there, so a warm exec takes one transaction before its request instead
 * of two.  Anything else (a refusal, a materialization, a token to
 * deliver, a budget stop) is left to start_exec after the load, as before.
 */
bool
exec_start_at_load(WorkerCall *call)
{
	MeshWorkspace *ws = &call->ws;
	MemoryContext old;

	if (ws->status != MESH_WS_READY || (ws->has_grants && !ws->token_valid) ||
		(ws->budget_seconds >= 0 && ws->budget_seconds - ws->compute_seconds <= 0) ||
		!(call->req.exec.eval ? call->ws.caps.eval : call->ws.caps.shell) ||
		(call->op == MESH_OP_EXEC_START &&
		 (!call->ws.caps.background || !admit_background(call, false))))
		return false;
	old = MemoryContextSwitchTo(call->cxt);
	if (!call->be.driver && !mesh_backend_from_workspace(ws, &call->be))
	{
		/* load_backend, after the load, tells the caller */
		memset(&call->be, 0, sizeof(call->be));
		MemoryContextSwitchTo(old);
		return false;
	}
	exec_spec_from_request(call);
	(void) bound_by_budget(call);	/* budget is left: it only bounds the timeout */
	MemoryContextSwitchTo(old);
	store_exec_start_here(ws, &call->spec, &call->exec_id, &call->delivered);
	call->started_at_load = true;
	return true;
}

/*
 * The checks and the exec row of a command that did not start at the
 * run's load: each refusal is the caller's error.
 */
static bool
start_exec_row(WorkerCall *call)
{
	ErrorData  *err;
	XLogRecPtr	exec_row_lsn;

	if (call->req.exec.eval && !call->ws.caps.eval)
	{
		reply_error(call, ERRCODE_FEATURE_NOT_SUPPORTED,
					psprintf("backend \"%s\" cannot evaluate snippets (it does not declare the eval capability)",
							 call->ws.backend_kind),
					NULL, "Evaluate in a run whose agent is pinned to a backend with eval (the isolate driver).");
		return false;
	}
	if (!call->req.exec.eval && !call->ws.caps.shell)
	{
		reply_error(call, ERRCODE_FEATURE_NOT_SUPPORTED,
					psprintf("backend \"%s\" cannot run commands (it does not declare the shell capability)",
							 call->ws.backend_kind),
					NULL, "Pin this agent to a backend with shell, or use only file calls.");
		return false;
	}
	if (call->op == MESH_OP_EXEC_START && !call->ws.caps.background)
	{
		reply_error(call, ERRCODE_FEATURE_NOT_SUPPORTED,
					psprintf("backend \"%s\" cannot keep a command running between calls (it does not declare the background capability)",
							 call->ws.backend_kind),
					NULL, "Run the command with mesh_exec, or pin this agent to a backend with background.");
		return false;
	}
	if (call->op == MESH_OP_EXEC_START && !admit_background(call, true))
		return false;
	exec_spec_from_request(call);
	if (!bound_by_budget(call))
		return false;
	if (!store_exec_started(&call->ws, &call->spec, &call->exec_id, &exec_row_lsn,
							&call->delivered, &err))
	{
		reply_txn_error(call, err);
		return false;
	}
	keep_exec_row(call, exec_row_lsn);
	return true;
}

/*
 * Before its request leaves, an exec's row must be in the WAL files, where
 * no process's crash can lose it (the server's crash restart drops only WAL
 * buffers).  An ordinary exec's row needs no flush of its own: the flush of
 * its result, before the caller hears of it, takes the row to disk too (or
 * the WAL writer does, within wal_writer_delay, for a long command).  A
 * background command's caller hears of it (its id) before any result, so
 * its row is flushed before its request, as an acquisition's move is.
 */
static void
keep_exec_row(WorkerCall *call, XLogRecPtr lsn)
{
	if (call->spec.background)
		worker_want_durable(lsn);
	else
		worker_want_written(lsn);
}

void
start_exec(WorkerCall *call)
{
	MeshHttpRequest req;
	bool		built;

	if (call->started_at_load)
	{
		/* its row was written in the run's load (exec_start_at_load) */
		call->started_at_load = false;
		keep_exec_row(call, call->load_lsn);
	}
	else if (!start_exec_row(call))
		return;
	deliver_environment(call);
	call->spec.exec_key = psprintf(INT64_FORMAT, call->exec_id);
	built = call->be.driver->exec_request(&call->be, begin_op(call), call->ws.external_ref,
										  &call->spec, &req, &call->run.err);
	call->op_started = GetCurrentTimestamp();
	if (call->spec.background)
		start_op(call, STEP_OPERATING, built, &req, mesh_parse_exec_start, NULL,
				 worker_small_response_limit(call), call->def->finish);
	else
		start_op(call, STEP_OPERATING, built, &req, mesh_parse_exec, &call->out.exec,
				 exec_response_limit(call), call->def->finish);
}

/*
 * The output as the command wrote it, redacted, goes to STREAMS, to be
 * stored whole (up to mesh.exec_output_limit) with the exec's end; what is
 * left in RESULT is the clamp people see.
 */
static void
keep_output(WorkerCall *call, MeshExecResult *result, MeshOutputStream streams[2])
{
	MeshOutputStream *out = &streams[0];
	MeshOutputStream *errs = &streams[1];

	out->dropped = result->stdout_total - (int64) result->stdout_len;
	errs->dropped = result->stderr_total - (int64) result->stderr_len;
	redact_delivered(call, result);
	out->data = result->stdout_data;
	out->len = result->stdout_len;
	errs->data = result->stderr_data;
	errs->len = result->stderr_len;
	/* the lengths as stored: a redacted secret's label need not be as long as the secret */
	result->stdout_total = out->dropped + (int64) out->len;
	result->stderr_total = errs->dropped + (int64) errs->len;
	result->truncated = false;
	exec_output_clamp(&result->stdout_data, &result->stdout_len, result->stdout_total,
					  clamp_bytes(call), &result->truncated);
	exec_output_clamp(&result->stderr_data, &result->stderr_len, result->stderr_total,
					  clamp_bytes(call), &result->truncated);
}

/* The caller hears that not all of its command's output was stored, and why. */
static void
notice_output_stopped(WorkerCall *call, const char *reason)
{
	if (reason == NULL)
		return;
	queue_notice(call, psprintf("mesh: not all output of exec " INT64_FORMAT " of run \"%s\" was stored: "
								"the %s is reached (%s); the command ran to its end, "
								"and its row says output_stopped = '%s'",
								call->exec_id, call->run_id,
								strcmp(reason, "disk reserve") == 0 ? "data directory's free-space reserve"
								: strcmp(reason, "run quota") == 0 ? "run's output quota"
								: strcmp(reason, "install quota") == 0 ? "install's output quota"
								: "command's output limit",
								exec_output_stop_setting(reason), reason));
}

/*
 * Record the exec's end with its output stored whole, in one transaction.
 * When that fails, the end alone (the rows say all the output was dropped):
 * a failure to store loses only the stored copy, never the record.
 */
static bool
record_exec_end(WorkerCall *call, MeshExecRecord *rec, MeshOutputStream streams[2],
				XLogRecPtr *lsn, ErrorData **err)
{
	MeshOutputStream none[2] = {
		{NULL, 0, streams[0].dropped + (int64) streams[0].len},
		{NULL, 0, streams[1].dropped + (int64) streams[1].len}};
	const char *stopped = NULL;

	rec->output = streams;
	if (store_exec_finished(call->exec_id, rec, lsn, &stopped, err))
	{
		notice_output_stopped(call, stopped);
		return true;
	}
	ereport(LOG,
			(errmsg("mesh: the output of exec " INT64_FORMAT " was not stored: %s",
					call->exec_id, (*err)->message)));
	FreeErrorData(*err);
	rec->output = none;
	return store_exec_finished(call->exec_id, rec, lsn, NULL, err);
}

/* Tell the caller, too, when the command left its workspace at its disk quota. */
static void
notice_disk_quota(WorkerCall *call, const MeshExecResult *r)
{
	if (r->disk_quota)
		queue_notice(call, psprintf("mesh: the workspace of run \"%s\" reached its disk quota: its writes fail (EDQUOT) until files are removed; a larger size tier has a larger quota",
									call->run_id));
}

#define EXEC_INTERRUPTED_BY_BACKEND \
	"interrupted: the backend ended the command while it ran (its sandbox was stopped or released, as when the server restarts)"

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
	queue_notice(call, msg.data);
}

/* The command's result, for the caller's row. */
static void
reply_exec(WorkerCall *call, const MeshExecResult *result, MeshExecStatus status)
{
	StringInfo	head = begin_reply(call, sizeof(MeshExecReply));
	MeshExecReply r;

	r.exec_id = call->exec_id;
	r.stdout_bytes = result->stdout_total;
	r.stderr_bytes = result->stderr_total;
	r.exit_code = result->exit_code;
	r.truncated = result->truncated;
	r.status = mesh_msg_add_string(head, mesh_exec_status_names[status]);
	r.stdout_text = mesh_msg_add_string(head, result->stdout_data);
	r.stderr_text = mesh_msg_add_string(head, result->stderr_data);
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, NULL, 0);
}

void
finish_exec(WorkerCall *call)
{
	MeshExecResult result = call->out.exec;
	MeshExecRecord rec = {0};
	MeshOutputStream streams[2];
	ErrorData  *err;
	XLogRecPtr	lsn;

	if (call->run.result == MESH_STEP_FAILED)
	{
		finish_exec_failed(call);
		return;
	}
	keep_output(call, &result, streams);
	result.stdout_data = mesh_sanitize_text(result.stdout_data, result.stdout_len);
	result.stderr_data = mesh_sanitize_text(result.stderr_data, result.stderr_len);
	rec.status = exec_status(&result);
	if (rec.status == MESH_EXEC_TIMEOUT && call->budget_bound)
		rec.status = MESH_EXEC_BUDGET_EXHAUSTED;
	if (rec.status == MESH_EXEC_ERROR)
		rec.error = EXEC_INTERRUPTED_BY_BACKEND;
	else
		rec.error = exec_disk_quota_error(&result);
	rec.result = &result;
	rec.charged_seconds = result.cpu_metered ? result.cpu_seconds : result.wall_seconds;
	/* stopped at the bound the budget set: what was left of it is spent, whatever the basis */
	if (rec.status == MESH_EXEC_BUDGET_EXHAUSTED)
		rec.charged_seconds = Max(rec.charged_seconds,
								  call->ws.budget_seconds - call->ws.compute_seconds);
	rec.charge_basis = result.cpu_metered ? "cpu" : "wall";
	if (!record_exec_end(call, &rec, streams, &lsn, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	worker_want_reply_durable(lsn);
	charge_budget(call, rec.charged_seconds);
	notice_egress_denials(call, result.egress_denials);
	notice_disk_quota(call, &result);
	if (rec.status == MESH_EXEC_OOM)
		climb_tier(call);
	if (rec.status == MESH_EXEC_ERROR)
		reply_error(call, failure_sqlerrcode(MESH_FAIL_UNAVAILABLE),
					psprintf("the command of run \"%s\" was interrupted: backend \"%s\" ended it while it ran",
							 call->run_id, call->ws.backend_kind),
					"Its sandbox was stopped or released, as when the server restarts; the exec is recorded as failed.",
					"Run the command again: the run's next call wakes its workspace.");
	else
		reply_exec(call, &result, rec.status);
}

static void finish_cancel(WorkerCall *call);

/* The caller stopped waiting: kill the command's tree in the sandbox. */
void
cancel_exec(WorkerCall *call)
{
	MeshHttpRequest req;
	bool		built;

	/* the exec's own request is abandoned with the run: the daemon sees the disconnect */
	built = call->be.driver->kill_request(&call->be, begin_op(call), call->ws.external_ref,
										  call->spec.exec_key, NULL, &req, &call->run.err);
	start_op(call, STEP_KILLING, built, &req, mesh_parse_kill, NULL,
			 worker_small_response_limit(call), finish_cancel);
}

/* The kill's answer: the exec is recorded cancelled, whatever the backend said. */
static void
finish_cancel(WorkerCall *call)
{
	MeshExecRecord rec = {0};
	const char *transport_error = call->run.resp.transport_error;

	rec.status = MESH_EXEC_CANCELLED;
	rec.error = transport_error
		? psprintf("cancelled by the caller; the kill request failed: %s", transport_error)
		: "cancelled by the caller (interrupt or statement_timeout)";
	rec.charged_seconds = seconds_since(call->op_started);
	rec.charge_basis = "wall";
	if (record_exec_end_only(call, &rec))
		charge_budget(call, rec.charged_seconds);
	call->step = STEP_FINISHED;
}
