/*-------------------------------------------------------------------------
 *
 * worker_background.c
 *	  The mesh worker's background commands: start, follow, signal.
 *
 * mesh_exec_start is an exec whose request asks the backend to start the
 * command and answer at once (its exec row first, budget, secrets and
 * egress as for any exec, worker_exec.c).  Once the backend says it runs,
 * the caller gets the exec id and the same call goes on without it: it
 * follows the command, asking the backend for what it wrote since the last
 * answer (a long poll), storing each step's output in mesh.exec_output with
 * a NOTIFY on mesh_exec_<id> in the same transaction, at most one step per
 * mesh.exec_notify_interval, until the command ends: then its row is
 * finished as mesh_exec's would be and the backend may forget it.
 *
 * Secrets are redacted from what is stored.  A secret may be split across
 * two answers, so the last bytes of a stream (one less than the longest
 * secret) are held back until more come or the command ends; the backend
 * is told which bytes are stored for good, so holding back never loses a
 * byte, whatever dies.  A worker that restarts takes up its predecessor's
 * background commands where their rows say it had got to.
 *
 * Bounds: a worker follows at most mesh.max_background_per_worker commands,
 * and none past what its open-files limit leaves after its other calls'
 * sockets (each follower holds one); a start beyond either is refused
 * before its row is written.  The answers of all its followers share one
 * memory budget, and each answer is freed once stored: a command that
 * writes faster than that is stored fills the backend's buffer and blocks
 * on its pipe, as on a terminal.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "credentials.h"
#include "exec_output.h"
#include "settings.h"
#include "worker_acquire.h"
#include "worker_background.h"
#include "worker_call.h"
#include "worker_command.h"
#include "worker_durable.h"
#include "worker_http.h"
#include "worker_reply.h"

/* The most each answer carries of each stream ... */
#define FOLLOW_MAX_BYTES (4 * 1024 * 1024)
/* ... and the least, however many commands share ... */
#define FOLLOW_MIN_BYTES (64 * 1024)
/* ... the bytes all the answers of a worker's followers may carry at once. */
#define FOLLOW_ANSWERS_BUDGET (32 * 1024 * 1024)
/* How long the backend may hold an output request open when nothing comes. */
#define FOLLOW_WAIT_MS 10000
/* An unreachable backend is asked again after this long ... */
#define FOLLOW_RETRY_MS 1000
/* ... until this long past the command's timeout, when it is given up. */
#define FOLLOW_GIVE_UP_MS 60000

typedef struct BackgroundFollow
{
	int64		stored[2];		/* stdout, stderr: bytes stored (redacted) */
	int64		kept[2];		/* the backend's offsets up to which they are stored */
	StringInfoData held[2];		/* read from kept on, held back from storing */
	size_t		hold_back;		/* the longest secret's length less one */
	TimestampTz give_up_at;		/* an unreachable backend is given up then */
	MemoryContext step_cxt;		/* one request and its answer: reset at each request */
} BackgroundFollow;

static void ask_for_output(WorkerCall *call);
static void finish_exec_kill(WorkerCall *call);
static void finish_exec_extend(WorkerCall *call);
static void exec_call_extended(WorkerCall *call, long by_ms);

/*
 * The most an answer may carry of each stream: the worker's budget shared
 * among its followers, so their answers together stay within it.
 */
static size_t
follow_max_bytes(void)
{
	size_t		share = FOLLOW_ANSWERS_BUDGET / (2 * (size_t) Max(worker_background_slots_used(), 1));

	return Min(Max(share, FOLLOW_MIN_BYTES), FOLLOW_MAX_BYTES);
}

/* Room for both streams' bytes of one answer, and the envelope. */
static size_t
background_response_limit(WorkerCall *call)
{
	return 2 * (size_t) FOLLOW_MAX_BYTES + 64 * 1024;
}

/* What the call needs to follow its command, from where the rows say it got to. */
static BackgroundFollow *
new_follow(WorkerCall *call, const int64 stored[2], const int64 kept[2])
{
	BackgroundFollow *f = MemoryContextAllocZero(call->cxt, sizeof(BackgroundFollow));
	MemoryContext old = MemoryContextSwitchTo(call->cxt);
	ListCell   *lc;

	for (int i = 0; i < 2; i++)
	{
		f->stored[i] = stored[i];
		f->kept[i] = kept[i];
		initStringInfo(&f->held[i]);
	}
	foreach(lc, call->delivered)
	{
		size_t		len = strlen(((MeshDelivered *) lfirst(lc))->value);

		if (len > 0 && len - 1 > f->hold_back)
			f->hold_back = len - 1;
	}
	f->give_up_at = TimestampTzPlusMilliseconds(call->op_started,
												call->spec.timeout_ms + FOLLOW_GIVE_UP_MS);
	f->step_cxt = AllocSetContextCreate(call->cxt, "mesh background step", ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(old);
	return f;
}

/* The caller's answer to mesh_exec_start: the exec's id. */
static void
reply_started(WorkerCall *call)
{
	StringInfo	head = begin_reply(call, sizeof(MeshExecReply));
	MeshExecReply r = {0};

	r.exec_id = call->exec_id;
	r.status = mesh_msg_add_string(head, mesh_exec_status_names[MESH_EXEC_RUNNING]);
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, NULL, 0);
}

/* Ask the backend for what the command wrote past what was read. */
static void
ask_for_output(WorkerCall *call)
{
	BackgroundFollow *f = call->follow;
	MeshOutputAsk ask;
	MeshHttpRequest req;
	bool		built;
	MemoryContext old;

	/* a command followed for days must not grow the call: each step starts afresh */
	mesh_run_end(&call->run);
	MemoryContextReset(f->step_cxt);
	old = MemoryContextSwitchTo(f->step_cxt);
	ask.stdout_kept = f->kept[0];
	ask.stderr_kept = f->kept[1];
	ask.stdout_from = f->kept[0] + (int64) f->held[0].len;
	ask.stderr_from = f->kept[1] + (int64) f->held[1].len;
	ask.wait_ms = FOLLOW_WAIT_MS;
	ask.max_bytes = follow_max_bytes();
	built = call->be.driver->exec_output_request(&call->be, begin_op(call), call->ws.external_ref,
												 call->spec.exec_key, &ask, &req, &call->run.err);
	start_op(call, STEP_FOLLOWING, built, &req, mesh_parse_exec_output, &call->out.progress,
			 background_response_limit(call), finish_background);
	MemoryContextSwitchTo(old);
}

/* The next request waits until then (rate bound, or a retry), or goes now. */
static void
ask_after(WorkerCall *call, long delay_ms)
{
	if (delay_ms <= 0)
	{
		ask_for_output(call);
		return;
	}
	/* the answer is stored: a paused follower holds none of it */
	mesh_run_end(&call->run);
	MemoryContextReset(call->follow->step_cxt);
	call->wait_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay_ms);
	call->on_due = ask_for_output;	/* the loop calls it at wait_until */
	call->step = STEP_FOLLOW_PAUSED;
}

/* Start following: the backend said the command runs. */
static void
begin_following(WorkerCall *call, const int64 stored[2], const int64 kept[2])
{
	call->follow = new_follow(call, stored, kept);
	ask_for_output(call);
}

/* Whether the N bytes at S are the start (not the whole) of a secret of the run. */
static bool
starts_a_secret(List *secrets, const char *s, size_t n)
{
	ListCell   *lc;

	foreach(lc, secrets)
	{
		const char *v = ((MeshDelivered *) lfirst(lc))->value;

		if (strlen(v) > n && memcmp(v, s, n) == 0)
			return true;
	}
	return false;
}

/*
 * How many of the LEN read bytes at BUF can be stored now: all of them
 * once the command ended; else those before the earliest place where a
 * secret may begin that the next bytes would complete, and before any
 * secret that crosses that place (so no piece of a secret is ever stored
 * unredacted).  The rest is held back.
 */
static size_t
storable_len(WorkerCall *call, const char *buf, size_t len, bool ended)
{
	size_t		hold_back = call->follow->hold_back;
	size_t		p = len;
	bool		moved = true;
	ListCell   *lc;

	if (ended || hold_back == 0)
		return len;
	for (size_t q = len > hold_back ? len - hold_back : 0; q < len; q++)
		if (starts_a_secret(call->delivered, buf + q, len - q))
		{
			p = q;
			break;
		}
	while (moved && p < len)
	{
		moved = false;
		foreach(lc, call->delivered)
		{
			const char *v = ((MeshDelivered *) lfirst(lc))->value;
			size_t		vlen = strlen(v);

			for (size_t q = p >= vlen ? p - vlen + 1 : 0; q < p && q + vlen <= len; q++)
				if (memcmp(buf + q, v, vlen) == 0)
				{
					p = q;
					moved = true;
					break;
				}
		}
	}
	return p;
}

/*
 * The bytes of stream I that can be stored now (storable_len): what was
 * held plus what came.  Redacted into *out; the rest stays held.
 */
static void
take_stream(WorkerCall *call, int i, const char *data, size_t len, bool ended,
			MeshOutputStream *out, int64 *read)
{
	BackgroundFollow *f = call->follow;
	StringInfo	held = &f->held[i];
	size_t		storable;
	char	   *bytes;
	size_t		n;
	ListCell   *lc;

	if (len > 0)
		appendBinaryStringInfo(held, data, (int) len);
	storable = storable_len(call, held->data, (size_t) held->len, ended);
	n = storable;
	bytes = palloc(n + 1);
	memcpy(bytes, held->data, n);
	foreach(lc, call->delivered)
	{
		MeshDelivered *d = lfirst(lc);

		mesh_redact(&bytes, &n, d->value, d->variable ? d->variable : d->name);
	}
	out->data = bytes;
	out->len = n;
	out->dropped = f->stored[i];	/* where they start, as stored */
	/* what stays held moves to the front */
	memmove(held->data, held->data + storable, held->len - storable);
	held->len -= (int) storable;
	held->data[held->len] = '\0';
	f->kept[i] += (int64) storable;
	f->stored[i] += (int64) n;
	*read = f->kept[i];
}

/*
 * The backend answered with bytes the follower had not read, starting past
 * where it asked (it no longer held some): the ones between are gone.  The
 * stored stream stays contiguous; the log says what went.
 */
static void
note_gap(WorkerCall *call, int i, int64 from)
{
	BackgroundFollow *f = call->follow;
	int64		asked = f->kept[i] + (int64) f->held[i].len;

	if (from <= asked)
		return;
	ereport(LOG,
			(errmsg("mesh: backend \"%s\" no longer held " INT64_FORMAT " byte(s) of %s of exec " INT64_FORMAT,
					call->ws.backend_kind, from - asked, i == 0 ? "stdout" : "stderr", call->exec_id)));
	f->kept[i] = from - (int64) f->held[i].len;
}

/* Store one answer's bytes (with its NOTIFYs); false when that failed. */
static bool
store_progress(WorkerCall *call, const MeshExecProgress *p)
{
	MeshOutputStream fresh[2];
	int64		read[2];
	ErrorData  *err;
	XLogRecPtr	lsn;

	note_gap(call, 0, p->stdout_from);
	note_gap(call, 1, p->stderr_from);
	take_stream(call, 0, p->stdout_data, p->stdout_len, p->ended, &fresh[0], &read[0]);
	take_stream(call, 1, p->stderr_data, p->stderr_len, p->ended, &fresh[1], &read[1]);
	if (fresh[0].len == 0 && fresh[1].len == 0 && !p->ended)
		return true;
	if (!store_exec_progress(call->exec_id, fresh, read, &lsn, &err))
	{
		ereport(LOG,
				(errmsg("mesh: the output of background exec " INT64_FORMAT " was not stored: %s",
						call->exec_id, err->message)));
		FreeErrorData(err);
		return false;
	}
	/* stored for good before the next request tells the backend so */
	worker_want_durable(lsn);
	return true;
}

/* The NOTIFY that tells listeners the command ended. */
static char *
end_payload(WorkerCall *call, MeshExecStatus status, const MeshExecResult *r)
{
	BackgroundFollow *f = call->follow;

	return psprintf("{\"status\": \"%s\", \"exit_code\": %s, \"stdout_bytes\": " INT64_FORMAT
					", \"stderr_bytes\": " INT64_FORMAT "}",
					mesh_exec_status_names[status], r ? psprintf("%d", r->exit_code) : "null",
					f ? f->stored[0] : 0, f ? f->stored[1] : 0);
}

/*
 * Record the command's end (with the last NOTIFY) and charge the run; the
 * waiters of mesh_exec_wait look again after this turn's flush.
 */
static void
store_end(WorkerCall *call, MeshExecRecord *rec)
{
	if (!record_exec_end_only(call, rec))
		return;
	exec_ended_this_turn = true;
	charge_budget(call, rec->charged_seconds);
}

/* The backend's end of the command, recorded as mesh_exec records one. */
static void
record_end(WorkerCall *call, MeshExecResult *result)
{
	MeshExecRecord rec = {0};
	ErrorData  *err;

	if (!store_exec_clamped(call->exec_id, mesh_max_output_bytes, result, &err))
	{
		FreeErrorData(err);
		result->stdout_data = result->stderr_data = "";
	}
	rec.status = exec_status(result);
	if (rec.status == MESH_EXEC_TIMEOUT && call->budget_bound)
		rec.status = MESH_EXEC_BUDGET_EXHAUSTED;
	if (result->killed && rec.status == MESH_EXEC_ERROR)
	{
		rec.status = MESH_EXEC_KILLED;
		rec.error = "killed: mesh_exec_kill signalled it, or its workspace was released or stopped";
	}
	else
		rec.error = exec_disk_quota_error(result);
	rec.result = result;
	rec.charged_seconds = result->cpu_metered ? result->cpu_seconds : result->wall_seconds;
	if (rec.status == MESH_EXEC_BUDGET_EXHAUSTED)
		rec.charged_seconds = Max(rec.charged_seconds,
								  call->ws.budget_seconds - call->ws.compute_seconds);
	rec.charge_basis = result->cpu_metered ? "cpu" : "wall";
	rec.notify = end_payload(call, rec.status, result);
	store_end(call, &rec);
}

/* The command could not be followed to its end: its row says why. */
static void
record_lost(WorkerCall *call, const char *why)
{
	MeshExecRecord rec = {0};

	rec.status = MESH_EXEC_ERROR;
	rec.error = why;
	rec.charged_seconds = Min((double) (GetCurrentTimestamp() - call->op_started) / 1000000.0,
							  call->spec.timeout_ms / 1000.0);
	rec.charge_basis = "wall";
	rec.notify = end_payload(call, MESH_EXEC_ERROR, NULL);
	store_end(call, &rec);
}

/* The end is stored: the backend may drop the command's record. */
static void
forget(WorkerCall *call)
{
	MeshHttpRequest req;
	bool		built;

	built = call->be.driver->exec_forget_request(&call->be, begin_op(call), call->ws.external_ref,
												 call->spec.exec_key, &req, &call->run.err);
	start_op(call, STEP_FORGETTING, built, &req, mesh_parse_exec_forget, NULL,
			 worker_small_response_limit(call), finish_background);
}

/* An output request failed: ask again later, or give the command up. */
static void
follow_failed(WorkerCall *call)
{
	const MeshError *merr = &call->run.err;

	/* the run's release is ending it: the release records that, then this call finishes */
	if (run_is_changing(call->run_id, call))
	{
		ask_after(call, FOLLOW_RETRY_MS);
		return;
	}
	/* unreachable, or no descriptor for now: the command runs on, its bytes wait */
	if ((merr->failure == MESH_FAIL_UNAVAILABLE || merr->failure == MESH_FAIL_NO_RESOURCES) &&
		GetCurrentTimestamp() < call->follow->give_up_at)
	{
		ask_after(call, FOLLOW_RETRY_MS);
		return;
	}
	record_lost(call, psprintf("interrupted: backend \"%s\" no longer has the command (%s)",
							   call->ws.backend_kind,
							   merr->message ? merr->message : "no reason given"));
	call->step = STEP_FINISHED;
}

/* An answer to an output request: store it, then end or ask again. */
static void
take_output(WorkerCall *call)
{
	MeshExecProgress *p = &call->out.progress;
	bool		got;

	MemoryContextSwitchTo(call->follow->step_cxt);	/* advance_all switches back */
	if (call->run.result == MESH_STEP_FAILED)
	{
		follow_failed(call);
		return;
	}
	got = p->stdout_len > 0 || p->stderr_len > 0;
	if (!store_progress(call, p))
	{
		ask_after(call, FOLLOW_RETRY_MS);	/* nothing was told kept: the same bytes come again */
		return;
	}
	if (p->ended)
	{
		record_end(call, &p->result);
		forget(call);
		return;
	}
	/* at most one step per interval: that bounds the NOTIFYs and this call's work */
	ask_after(call, got ? mesh_exec_notify_interval_ms : 0);
}

/*
 * A background command's driver runs end here: the start, each output
 * request, the forget.
 */
void
finish_background(WorkerCall *call)
{
	static const int64 none[2] = {0, 0};

	switch (call->step)
	{
		case STEP_OPERATING:
			if (call->run.result == MESH_STEP_FAILED)
			{
				finish_exec_failed(call);
				return;
			}
			reply_started(call);
			begin_following(call, none, none);
			break;
		case STEP_FOLLOWING:
			take_output(call);
			break;
		case STEP_FORGETTING:
			if (call->run.result == MESH_STEP_FAILED)
				ereport(LOG,
						(errmsg("mesh: backend \"%s\" did not forget exec " INT64_FORMAT ": %s",
								call->ws.backend_kind, call->exec_id, call->run.err.message)));
			call->step = STEP_FINISHED;
			break;
		default:
			elog(LOG, "mesh: background exec " INT64_FORMAT " ended in an unexpected step", call->exec_id);
			call->step = STEP_FINISHED;
	}
}

/*
 * At a worker's start: follow the background commands its predecessor
 * followed, from where their rows say it had got to.
 */
void
spawn_followers(void)
{
	List	   *follows;
	List	   *run_ids;
	ErrorData  *err;
	ListCell   *lc;
	ListCell   *lr;

	if (!store_background_execs(worker_index, mesh_shared->nworkers, &follows, &run_ids, &err))
	{
		ereport(LOG,
				(errmsg("mesh worker %d: background commands not taken up: %s", worker_index, err->message)));
		FreeErrorData(err);
		return;
	}
	forboth(lc, follows, lr, run_ids)
	{
		StringInfoData msg;

		initStringInfo(&msg);
		mesh_msg_begin(&msg, MESH_MSG_REQUEST, MESH_OP_EXEC_FOLLOW, sizeof(MeshFollowRequest));
		mesh_msg_set_fixed(&msg, lfirst(lc), sizeof(MeshFollowRequest));
		(void) spawn_internal_call(MESH_OP_EXEC_FOLLOW, lfirst(lr), &msg, false);
	}
	if (follows != NIL)
		ereport(LOG,
				(errmsg("mesh worker %d: following %d background command(s) again",
						worker_index, list_length(follows))));
}

/* A follower a restarted worker made for itself, its run loaded: go on following. */
void
start_follow(WorkerCall *call)
{
	const MeshFollowRequest *r = &call->req.follow;
	ErrorData  *err;

	call->exec_id = r->exec_id;
	call->op_started = r->started_at;
	call->spec.timeout_ms = (long) r->timeout_ms;
	call->spec.exec_key = psprintf(INT64_FORMAT, r->exec_id);
	/* it runs already: followed whatever the bounds say now */
	take_background_slot(call);
	if (call->ws.external_ref == NULL || !load_backend(call))
	{
		record_lost(call, "interrupted: the workspace of the command is gone");
		call->step = STEP_FINISHED;
		return;
	}
	if (!store_run_secrets(call->run_id, &call->delivered, &err))
	{
		/* without the secrets nothing may be stored: try again at the next start */
		ereport(LOG, (errmsg("mesh: exec " INT64_FORMAT " not followed: %s", r->exec_id, err->message)));
		FreeErrorData(err);
		call->step = STEP_FINISHED;
		return;
	}
	begin_following(call, r->stored, r->read);
}

/* mesh_exec_kill: signal the command's whole tree. */
void
start_exec_kill(WorkerCall *call)
{
	const MeshKillRequest *r = &call->req.kill;
	MeshHttpRequest req;
	bool		built;

	if (call->ws.external_ref == NULL)
	{
		StringInfo	head = begin_reply(call, sizeof(MeshKillReply));
		MeshKillReply k = {false};

		mesh_msg_set_fixed(head, &k, sizeof(k));
		finish_with(call, head, NULL, 0);
		return;
	}
	if (!load_backend(call))
		return;
	call->exec_id = r->exec_id;
	built = call->be.driver->kill_request(&call->be, begin_op(call), call->ws.external_ref,
										  psprintf(INT64_FORMAT, r->exec_id),
										  mesh_msg_string(&call->msg, r->signal), &req,
										  &call->run.err);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_kill, NULL,
			 worker_small_response_limit(call), finish_exec_kill);
}

/* The kill's answer: the caller hears whether the command was signalled. */
static void
finish_exec_kill(WorkerCall *call)
{
	StringInfo	head;
	MeshKillReply k = {true};
	ErrorData  *err;

	if (call->run.result == MESH_STEP_FAILED)
	{
		reply_backend_error(call, "the kill", &call->run.err);
		return;
	}
	if (!store_exec_signalled(&call->ws, call->exec_id,
							  mesh_msg_string(&call->msg, call->req.kill.signal), &err))
		FreeErrorData(err);
	head = begin_reply(call, sizeof(MeshKillReply));
	mesh_msg_set_fixed(head, &k, sizeof(k));
	finish_with(call, head, NULL, 0);
}

/*
 * mesh_exec_extend: move a running command's deadline later.  Every
 * refusal comes before the backend is called: an exec that is not running,
 * a backend that does not declare extend_timeout, a timeout past what a
 * command may have or past the run's compute budget.
 */
void
start_exec_extend(WorkerCall *call)
{
	const MeshExtendRequest *r = &call->req.extend;
	MeshHttpRequest req;
	ErrorData  *err;
	MeshExtendCheck check;
	int64		total;
	bool		built;

	if (!store_exec_for_extend(call->run_id, r->exec_id, r->by_ms, &check, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (check.status == NULL)
	{
		reply_error(call, ERRCODE_UNDEFINED_OBJECT,
					psprintf("exec " INT64_FORMAT " does not exist", r->exec_id), NULL,
					"Pass the id mesh_exec or mesh_exec_start returned.");
		return;
	}
	if (strcmp(check.status, "running") != 0)
	{
		reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					psprintf("exec " INT64_FORMAT " is not running (%s): there is no deadline to extend",
							 r->exec_id, check.status),
					NULL, "Only a running command's timeout can be extended.");
		return;
	}
	if (!call->ws.caps.extend_timeout || call->ws.external_ref == NULL)
	{
		reply_error(call, ERRCODE_FEATURE_NOT_SUPPORTED,
					psprintf("backend \"%s\" cannot extend a running command's timeout (it does not declare the extend_timeout capability)",
							 call->ws.backend_kind ? call->ws.backend_kind : "(none)"),
					NULL,
					"Give the command a longer timeout when it starts, or pin the agent to a backend that declares extend_timeout.");
		return;
	}
	total = check.timeout_ms + r->by_ms;
	if (total > MESH_MAX_TIMEOUT_MS)
	{
		reply_error(call, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
					psprintf("exec " INT64_FORMAT " would have a timeout of %.0f seconds, over the 7 days a command may have",
							 r->exec_id, total / 1000.0),
					NULL, "Extend it by less, or start the work as a new command.");
		return;
	}
	if (call->ws.budget_seconds >= 0 &&
		total / 1000.0 > call->ws.budget_seconds - call->ws.compute_seconds)
	{
		reply_error(call, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
					psprintf("exec " INT64_FORMAT " would have a timeout of %.0f seconds, past the run's compute budget (%.0f of %.0f compute-seconds left)",
							 r->exec_id, total / 1000.0,
							 Max(call->ws.budget_seconds - call->ws.compute_seconds, 0),
							 call->ws.budget_seconds),
					NULL, "Raise the budget with mesh.run_set_budget() or mesh.agent_set_budget(), or extend by less.");
		return;
	}
	if (check.past_lifetime)
	{
		reply_error(call, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
					psprintf("exec " INT64_FORMAT " would run past its run's lifetime bound (%s)",
							 r->exec_id, check.lifetime_until),
					NULL, "Move the run's bound first with mesh_extend(run_id, by), or extend by less.");
		return;
	}
	if (!load_backend(call))
		return;
	call->exec_id = r->exec_id;
	built = call->be.driver->extend_request != NULL &&
		call->be.driver->extend_request(&call->be, begin_op(call), call->ws.external_ref,
										psprintf(INT64_FORMAT, r->exec_id), r->by_ms, &req,
										&call->run.err);
	if (call->be.driver->extend_request == NULL)
		mesh_error_set(&call->run.err, MESH_FAIL_BAD_REQUEST,
					   "the driver of backend \"%s\" has no extend call", call->ws.backend_kind);
	start_op(call, STEP_OPERATING, built, &req, mesh_parse_extend, &call->out.timeout_ms,
			 worker_small_response_limit(call), finish_exec_extend);
}

/*
 * mesh_exec_extend moved exec EXEC_ID's deadline BY_MS later: the calls of
 * this worker that carry the command (a foreground exec's request in flight,
 * a background command's follower) wait that much longer for its end.  A
 * run's calls are all this worker's (mesh_worker_for_run), so no other
 * worker has one.
 */
static void
extend_calls_of_exec(int64 exec_id, long by_ms)
{
	dlist_iter	iter;

	dlist_foreach(iter, &worker_calls)
	{
		WorkerCall *other = dlist_container(WorkerCall, node, iter.cur);

		if (other->exec_id == exec_id &&
			(other->op == MESH_OP_EXEC || other->op == MESH_OP_EXEC_START ||
			 other->op == MESH_OP_EXEC_FOLLOW))
			exec_call_extended(other, by_ms);
	}
}

/* The backend moved the deadline: the row and this worker's calls of the command follow. */
static void
finish_exec_extend(WorkerCall *call)
{
	const MeshExtendRequest *r = &call->req.extend;
	StringInfo	head;
	MeshExtendReply x = {0};
	ErrorData  *err;
	bool		found;

	if (call->run.result == MESH_STEP_FAILED && call->run.err.failure == MESH_FAIL_NOT_FOUND)
	{
		reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					psprintf("exec " INT64_FORMAT " is not running any more: there is no deadline to extend",
							 r->exec_id),
					NULL, "Only a running command's timeout can be extended.");
		return;
	}
	if (call->run.result == MESH_STEP_FAILED)
	{
		reply_backend_error(call, "the extension", &call->run.err);
		return;
	}
	if (!store_exec_extended(&call->ws, r->exec_id, r->by_ms, caller_role(call), &found,
							 &x.timeout_ms, &x.deadline, &err))
	{
		reply_txn_error(call, err);
		return;
	}
	if (!found)
	{
		reply_error(call, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					psprintf("exec " INT64_FORMAT " ended while its deadline moved", r->exec_id),
					NULL, "Only a running command's timeout can be extended.");
		return;
	}
	extend_calls_of_exec(r->exec_id, (long) r->by_ms);
	head = begin_reply(call, sizeof(MeshExtendReply));
	mesh_msg_set_fixed(head, &x, sizeof(x));
	finish_with(call, head, NULL, 0);
}

/*
 * A call carrying a command whose deadline moved BY_MS later: a foreground
 * exec's request waits that much longer for the answer, a follower gives
 * an unreachable backend up that much later, and both charge up to the new
 * timeout.
 */
static void
exec_call_extended(WorkerCall *call, long by_ms)
{
	call->spec.timeout_ms += by_ms;
	if (call->follow)
		call->follow->give_up_at = TimestampTzPlusMilliseconds(call->follow->give_up_at, by_ms);
	if (call->op == MESH_OP_EXEC && call->step == STEP_OPERATING && call->run.transfer &&
		!mesh_http_extend(call->run.transfer, by_ms))
		ereport(LOG,
				(errmsg("mesh: the request of exec " INT64_FORMAT " keeps its deadline: curl refused a new one",
						call->exec_id)));
}
