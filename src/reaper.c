/*-------------------------------------------------------------------------
 *
 * reaper.c
 *	  The reaper: no sandbox outlives the reason it existed.
 *
 * A background worker that sweeps at start-up and every
 * mesh.reaper_interval, each sweep bounded by mesh.reaper_sweep_timeout:
 *
 *	1. execs left running by a crash past their timeout are failed and
 *	   charged for the wall time they could have used; history past its
 *	   retention goes (stored output, finished execs, events, released
 *	   workspaces; mesh.history_expire), its totals kept in mesh.usage_daily;
 *	   repository tokens past their expiry are ended, for the broker to
 *	   revoke at their provider (mesh.repository_tokens_expire);
 *	2. hibernated workspaces near their retention deadline are warned
 *	   about; workspaces whose run failed, that outlived mesh.settings'
 *	   max_run_lifetime, that sat idle past their idle timeout or stayed
 *	   hibernated past their retention deadline are released (idle ones hibernated where the backend can) -- through the
 *	   run's own worker, so a release never races the run's other calls and
 *	   always resolves the backend from the row;
 *	3. each backend in the catalog is reconciled against its own list: a
 *	   sandbox no row explains is released and logged, and every row that
 *	   says a sandbox runs, is being made, or may have been made is settled
 *	   to what the backend shows (settle_row): a ready row whose sandbox
 *	   vanished fails, an acquiring one goes back to pending (so it no
 *	   longer holds a concurrency slot), and so on;
 *	4. on each backend whose driver keeps snapshots, retired snapshots no
 *	   live workspace stands on are deleted and marked reclaimed, and the
 *	   backend's own snapshot list is reconciled with mesh.snapshots (a
 *	   snapshot no row explains is deleted and logged; a row whose snapshot
 *	   vanished, or an interrupted capture, is marked failed).
 *
 * Reclaiming does not wait for a sweep: a transaction that retires a
 * snapshot, or releases the last live workspace on a retired one, calls
 * mesh.snapshot_reclaim_soon(), which at its commit sets reclaim_wanted in
 * shared memory and this worker's latch; the worker then runs step 4's
 * reclaim alone, so a retired snapshot's disk comes back within seconds.
 * The sweep stays the backstop (a wake lost to a crash, a delete that
 * failed).
 *
 * Backends share the sweep's time fairly: each gets an equal share of what
 * is left when its turn comes, so one hung backend cannot starve the rest.
 * An operator runs a sweep now with mesh.sweep(), which asks this worker
 * (through its slot in shared memory) and returns what it did as rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "settings.h"
#include "store.h"
#include "txn.h"
#include "runner.h"

PG_FUNCTION_INFO_V1(mesh_sweep);
PG_FUNCTION_INFO_V1(mesh_snapshot_reclaim_soon);

/* A backend's list of a whole install's workspaces can be long. */
#define REAPER_MAX_RESPONSE (16 * 1024 * 1024)

static char *install_id;

/* mesh.sweep()'s columns, in order: the keys of the rows note() makes */
static const char *const sweep_columns[MESH_SWEEP_COLUMNS] = {"action", "run_id", "backend", "detail"};

/* One thing a sweep did, as the row mesh.sweep() returns. */
static void
note(json_t *rows, const char *action, const char *run_id, const char *backend,
	 const char *detail)
{
	json_array_append_new(rows, json_pack("{s:s,s:s?,s:s?,s:s?}", "action", action,
										  "run_id", run_id, "backend", backend,
										  "detail", detail));
}

/*
 * Run one statement in a transaction of the reaper's own and return its
 * rows.  Errors are logged and yield NULL: one failing step never stops a
 * sweep.
 */
static MeshRows *
reaper_query(const char *sql, int nargs, const MeshParam *params)
{
	MeshRows   *rows;
	ErrorData  *err;

	if (!mesh_txn_sql("mesh reaper: sweeping", MESH_COMMIT_DURABLE, sql, nargs, params, &rows, &err))
	{
		ereport(LOG, (errmsg("mesh reaper: %s", err->message)));
		FreeErrorData(err);
		return NULL;
	}
	return rows;
}

/*--------------------------------------------------------------------------
 * 1. Execs a crash left running
 *--------------------------------------------------------------------------
 */
/* Execs no worker finished within their timeout (mesh.fail_lost_execs). */
static void
fail_lost_execs(json_t *rows)
{
	List	   *lost;
	ListCell   *lc;
	ErrorData  *err;

	if (!store_fail_timed_out_execs(&lost, &err))
	{
		ereport(LOG, (errmsg("mesh reaper: %s", err->message)));
		FreeErrorData(err);
		return;
	}
	foreach(lc, lost)
	{
		MeshLostExec *le = lfirst(lc);

		note(rows, "exec_failed", le->run_id, NULL,
			 psprintf("exec " INT64_FORMAT " was still running past its timeout", le->exec_id));
	}
}

/* Repository tokens past their expiry: ended, the broker revokes them at their provider. */
static void
expire_repository_tokens(json_t *rows)
{
	MeshRows   *ended = reaper_query("SELECT mesh.repository_tokens_expire()::bigint AS n", 0, NULL);
	int64		n = ended != NULL && ended->n == 1 ? mesh_col_int64(ended, 0, "n") : 0;

	if (n > 0)
		note(rows, "repository_tokens_expired", NULL, NULL,
			 psprintf(INT64_FORMAT " repository token(s) passed their expiry: to be revoked at their provider", n));
}

/* Rows of each kind that one transaction of the expiry deletes, at most. */
#define EXPIRE_BATCH 5000

/* mesh.history_expire()'s columns: what one batch deleted, and the note each total makes. */
static const struct
{
	const char *column;
	const char *action;
	const char *what;
}			expired_kinds[] = {
	{"outputs", "output_expired", "the stored output of " INT64_FORMAT " exec(s) passed mesh.exec_output_retention"},
	{"execs", "execs_expired", INT64_FORMAT " finished exec(s) passed mesh.exec_retention (their totals are in mesh.usage_daily)"},
	{"events", "events_expired", INT64_FORMAT " event(s) passed mesh.event_retention"},
	{"workspaces", "workspaces_expired", INT64_FORMAT " released workspace row(s) passed mesh.workspace_retention (their totals are in mesh.usage_daily)"},
};

/*
 * History past its retention goes (mesh.history_expire, 20_retention.sql):
 * finished execs, events and released workspaces past theirs, folded first
 * into mesh.usage_daily, and the stored output of the execs kept past
 * mesh.exec_output_retention.  One batch per transaction of its own (no
 * lock outlives a batch), until no kind fills a batch or the time given is
 * used, so expiry keeps up with any rate of execs; a backlog waits for the
 * next sweep.
 */
static void
expire_history(json_t *rows, TimestampTz deadline)
{
	MeshParam	p = mesh_int4_param(EXPIRE_BATCH);
	int64		total[lengthof(expired_kinds)] = {0};
	bool		more;

	if (mesh_exec_output_retention_min == 0 && mesh_exec_retention_min == 0 &&
		mesh_event_retention_min == 0 && mesh_workspace_retention_min == 0)
		return;
	do
	{
		MeshRows   *done = reaper_query("SELECT * FROM mesh.history_expire(p_batch => $1)", 1, &p);

		more = false;
		for (int k = 0; done != NULL && done->n == 1 && k < lengthof(expired_kinds); k++)
		{
			int64		n = mesh_col_int64(done, 0, expired_kinds[k].column);

			total[k] += n;
			more |= n >= EXPIRE_BATCH;
		}
		CHECK_FOR_INTERRUPTS();
	} while (more && GetCurrentTimestamp() < deadline);
	for (int k = 0; k < lengthof(expired_kinds); k++)
		if (total[k] > 0)
			note(rows, expired_kinds[k].action, NULL, NULL, psprintf(expired_kinds[k].what, total[k]));
}

/*--------------------------------------------------------------------------
 * 2. Workspaces to release
 *--------------------------------------------------------------------------
 */
static const char due_sql[] =
"SELECT w.run_id, coalesce(w.backend_kind, '') AS backend, "
"       CASE WHEN w.status OPERATOR(pg_catalog.=) 'failed' THEN 'failed: ' || coalesce(w.status_reason, 'no reason recorded') "
"            WHEN w.status OPERATOR(pg_catalog.=) 'releasing' THEN 'finishing an interrupted release' "
"            WHEN w.status OPERATOR(pg_catalog.=) 'pending' AND w.hibernated_until < pg_catalog.now() "
"              THEN 'hibernated past its retention deadline (' || w.hibernated_until || ')' "
"            WHEN w.created_at < pg_catalog.now() - l.max_run_lifetime "
"              THEN 'outlived the longest possible run (' || l.max_run_lifetime || ')' "
"            ELSE 'idle for more than ' || l.idle_timeout END AS reason, "
"       w.status OPERATOR(pg_catalog.=) 'ready' AND w.created_at >= pg_catalog.now() - l.max_run_lifetime AS idle "
"  FROM mesh.workspaces w JOIN mesh.run_limits l ON l.workspace_id = w.id "
" WHERE (w.status OPERATOR(pg_catalog.=) 'failed' AND w.external_ref IS NOT NULL AND w.release_outcome IS NULL) "
"    OR (w.status OPERATOR(pg_catalog.=) 'releasing' AND w.release_outcome IS NULL) "
"    OR (w.status OPERATOR(pg_catalog.=) ANY ('{ready,acquiring,pending}') AND w.external_ref IS NOT NULL "
"        AND w.created_at < pg_catalog.now() - l.max_run_lifetime) "
"    OR (w.status OPERATOR(pg_catalog.=) 'pending' AND w.external_ref IS NOT NULL AND w.release_outcome IS NULL "
"        AND w.hibernated_until < pg_catalog.now()) "
"    OR (w.status OPERATOR(pg_catalog.=) 'ready' AND coalesce(w.last_used_at, w.materialized_at, w.created_at) < pg_catalog.now() - l.idle_timeout "
"        AND NOT EXISTS (SELECT 1 FROM mesh.execs e WHERE e.workspace_id OPERATOR(pg_catalog.=) w.id "
"                           AND e.status OPERATOR(pg_catalog.=) 'running')) "
" ORDER BY w.backend_kind, w.id LIMIT 1000";

/*
 * Hibernated workspaces near their retention deadline: warned about once,
 * an event and a NOTIFY (mesh.lifecycle_warn, 15_lifecycle.sql), before
 * release_due destroys them past it.
 */
static void
warn_expiring(json_t *rows)
{
	MeshRows   *warned = reaper_query("SELECT run_id, detail FROM mesh.lifecycle_warn()", 0, NULL);

	for (uint64 i = 0; warned != NULL && i < warned->n; i++)
		note(rows, "expiry_warning", mesh_col_text(warned, i, "run_id"), NULL,
			 mesh_col_text(warned, i, "detail"));
}

/* How many distinct backends appear from row 'from' on (rows sorted by backend). */
static int
backends_left(const MeshRows *due, uint64 from)
{
	int			n = 0;
	const char *prev = NULL;

	for (uint64 i = from; i < due->n; i++)
	{
		char	   *backend = mesh_col_text(due, i, "backend");

		if (prev == NULL || strcmp(prev, backend) != 0)
			n++;
		prev = backend;
	}
	return n;
}

/* An equal share of the time left, for the next backend's turn. */
static TimestampTz
fair_share(TimestampTz deadline, int backends)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now >= deadline || backends <= 1)
		return deadline;
	return now + (deadline - now) / backends;
}

/* Ask the run's worker to release its workspace; true when it answered. */
static bool
release_through_worker(const char *run_id, const char *reason, bool idle, TimestampTz until,
					   char **outcome, char **error)
{
	MemoryContext outer = CurrentMemoryContext;
	volatile bool ok = true;

	PG_TRY();
	{
		StringInfoData req;
		MeshReleaseRequest r = {0};
		MeshMsg		reply;

		StartTransactionCommand();
		initStringInfo(&req);
		mesh_msg_begin(&req, MESH_MSG_REQUEST, MESH_OP_RELEASE, sizeof(r));
		r.reason = mesh_msg_add_string(&req, reason);
		r.idle = idle;
		mesh_msg_set_fixed(&req, &r, sizeof(r));
		mesh_call_until(run_id, &req, NULL, 0, until, &reply);
		*outcome = MemoryContextStrdup(outer, mesh_msg_string(&reply, ((const MeshReleaseReply *)
																   mesh_msg_fixed(&reply, sizeof(MeshReleaseReply)))->outcome));
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *err;

		MemoryContextSwitchTo(outer);
		err = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		*error = pstrdup(err->message);
		FreeErrorData(err);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(outer);
	return ok;
}

static void
release_due(json_t *rows, TimestampTz deadline)
{
	MeshRows   *due = reaper_query(due_sql, 0, NULL);
	TimestampTz until = deadline;
	const char *backend = NULL;

	for (uint64 i = 0; due != NULL && i < due->n; i++)
	{
		char	   *run_id = mesh_col_text(due, i, "run_id");
		char	   *row_backend = mesh_col_text(due, i, "backend");
		char	   *reason = mesh_col_text(due, i, "reason");
		char	   *outcome = NULL;
		char	   *error = NULL;

		CHECK_FOR_INTERRUPTS();
		if (backend == NULL || strcmp(backend, row_backend) != 0)
		{
			backend = row_backend;
			until = fair_share(deadline, backends_left(due, i));
		}
		if (GetCurrentTimestamp() >= until)
		{
			note(rows, "release_deferred", run_id, row_backend, "the sweep's time for this backend ran out");
			continue;
		}
		if (release_through_worker(run_id, reason, mesh_col_bool(due, i, "idle"), until, &outcome, &error))
			note(rows, "released", run_id, row_backend, psprintf("%s: %s", outcome, reason));
		else
			note(rows, "release_failed", run_id, row_backend, psprintf("%s (%s)", error, reason));
	}
}

/*--------------------------------------------------------------------------
 * 3. Reconciliation against each backend's own list
 *--------------------------------------------------------------------------
 */
/*
 * Backends to reconcile: the enabled ones, and disabled ones that still
 * hold something a row says they minted (disabling never stops cleanup).
 */
static const char backends_sql[] =
"SELECT b.name, b.driver, b.config::text AS config, c.credential "
"  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
" WHERE b.enabled OR EXISTS (SELECT 1 FROM mesh.workspaces w WHERE w.backend_kind = b.name "
"                             AND w.external_ref IS NOT NULL "
"                             AND w.release_outcome IS DISTINCT FROM 'destroyed') "
" ORDER BY b.name";

/* Rows that explain a sandbox on this backend: everything not destroyed. */
static const char explained_sql[] =
"SELECT external_ref FROM mesh.workspaces "
" WHERE backend_kind = $1 AND external_ref IS NOT NULL "
"   AND release_outcome IS DISTINCT FROM 'destroyed'";

/*
 * Rows that say a sandbox is running, being made, or may have been made by
 * an acquire whose answer was lost (pending with a reference), read before
 * the backend's list so a row that changes meanwhile is never misjudged:
 * each settle statement re-checks the status it saw.
 */
static const char live_rows_sql[] =
"SELECT external_ref, " STATUS_INDEX("status") " AS status, "
"       run_id FROM mesh.workspaces "
" WHERE backend_kind = $1 AND external_ref IS NOT NULL AND release_outcome IS NULL "
"   AND status OPERATOR(pg_catalog.=) ANY ('{pending,acquiring,ready}')";

/* Move one row from the status the reaper saw to what the backend shows, with an event. */
static const char settle_sql[] =
"SELECT run_id, reason FROM mesh.workspace_settle($1, $2, $3::mesh.workspace_status, $4::mesh.status_reason_code) "
" WHERE run_id IS NOT NULL";

static const char orphan_event_sql[] =
"INSERT INTO mesh.events (kind, backend, detail) "
"VALUES ('orphan_released', $1, pg_catalog.jsonb_build_object('ref', $2, 'outcome', $3))";

/*
 * Drive one driver operation to its end, at most until the sweep's
 * deadline for this backend (the runner, runner.c).
 */
static bool
run_until(MeshDriverRun *run, bool built, const MeshHttpRequest *first, TimestampTz until,
		  MeshResponseParser parse, void *out, MeshError *err)
{
	mesh_run_start(run, built, first, parse, out, REAPER_MAX_RESPONSE);
	if (mesh_run_until(run, until) == MESH_STEP_DONE)
		return true;
	*err = run->err;
	return false;
}

/* The backend's entry for ref, or NULL when it lists none. */
static MeshListedWorkspace *
ref_listed(const char *ref, MeshListedWorkspace *items, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(items[i].ref, ref) == 0)
			return &items[i];
	return NULL;
}

static bool
ref_explained(const char *ref, const MeshRows *explained)
{
	for (uint64 r = 0; explained != NULL && r < explained->n; r++)
		if (strcmp(mesh_col_text(explained, r, "external_ref"), ref) == 0)
			return true;
	return false;
}

/* A sandbox no row explains: release it on its backend and say so. */
static void
release_orphan(json_t *rows, const MeshBackend *be, const char *ref, TimestampTz until)
{
	MeshHttpRequest req;
	MeshDriverRun run = {0};
	MeshOpState *st = mesh_run_begin(&run, be);
	MeshReleaseOutcome outcome;
	MeshError	merr = {0};
	const char *result;
	bool		built = be->driver->release_request(be, st, ref, false, &req, &run.err);

	if (!run_until(&run, built, &req, until, mesh_parse_release, &outcome, &merr))
		result = merr.message;
	else
		result = outcome == MESH_RELEASE_HIBERNATED ? "hibernated" : "destroyed";
	mesh_run_end(&run);
	{
		MeshParam	p[3] = {mesh_text_param(be->name), mesh_text_param(ref), mesh_text_param(result)};

		(void) reaper_query(orphan_event_sql, 3, p);
	}
	ereport(LOG, (errmsg("mesh reaper: released orphan sandbox %s on backend \"%s\": %s",
						 ref, be->name, result)));
	note(rows, "orphan_released", NULL, be->name, psprintf("%s: %s", ref, result));
}

/*
 * Move row r of live (read before the list) to what its backend shows, for
 * the reason code says (mesh.workspace_settle), if it is still as the
 * reaper saw it.
 */
static void
settle(json_t *rows, const char *backend, const MeshRows *live, uint64 r, MeshReasonCode code)
{
	MeshWorkspaceStatus from = mesh_col_status(live, r, "status");
	MeshParam	p[4] = {mesh_text_param(backend), mesh_text_param(mesh_col_text(live, r, "external_ref")),
		mesh_text_param(mesh_workspace_status_names[from]),
	mesh_text_param(mesh_reason_code_names[code])};
	MeshRows   *moved = reaper_query(settle_sql, 4, p);

	if (moved == NULL || moved->n == 0)
		return;
	if (code == MESH_REASON_LOST)
		note(rows, "workspace_lost", mesh_col_text(moved, 0, "run_id"), backend,
			 "the backend no longer has it; marked failed");
	else
		note(rows, "workspace_settled", mesh_col_text(moved, 0, "run_id"), backend,
			 psprintf("%s -> %s: %s", mesh_workspace_status_names[from],
					  code == MESH_REASON_FOUND_RUNNING ? "ready" : "pending",
					  mesh_col_text(moved, 0, "reason")));
}

/*
 * Make row r of live (ref, status, run_id; read before the list) agree with
 * what the backend shows for it (entry, NULL when it has none):
 *	ready, nothing there: the sandbox and its files are gone -> failed;
 *	acquiring, nothing there: nothing was made -> pending, the run's next
 *	  call tries again, and it no longer counts against the agent's limit;
 *	ready or acquiring, there but not running (its daemon hibernated it) ->
 *	  pending, as an idle hibernation is: the next call wakes it;
 *	pending, there and running (an acquire whose answer was lost) -> ready.
 */
static void
settle_row(json_t *rows, const char *backend, const MeshRows *live, uint64 r,
		   MeshListedWorkspace *entry)
{
	MeshWorkspaceStatus status = mesh_col_status(live, r, "status");

	if (status == MESH_WS_READY && entry == NULL)
		settle(rows, backend, live, r, MESH_REASON_LOST);
	else if (status == MESH_WS_ACQUIRING && entry == NULL)
		settle(rows, backend, live, r, MESH_REASON_ACQUIRE_INTERRUPTED);
	else if (status != MESH_WS_PENDING && entry != NULL && !entry->running)
		settle(rows, backend, live, r, MESH_REASON_HIBERNATED_BY_BACKEND);
	else if (status == MESH_WS_PENDING && entry != NULL && entry->running)
		settle(rows, backend, live, r, MESH_REASON_FOUND_RUNNING);
}

static void
reconcile_backend(json_t *rows, const MeshRows *backends, uint64 b, TimestampTz until)
{
	MeshBackend be;
	MeshHttpRequest req;
	MeshDriverRun run = {0};
	MeshOpState *st;
	MeshListing listing = {NULL, 0};
	MeshListedWorkspace *items;
	int			nitems;
	MeshError	merr = {0};
	bool		built;
	MeshRows   *explained;
	MeshRows   *live;
	const char *name = mesh_col_text(backends, b, "name");
	MeshParam	backend_param = mesh_text_param(name);

	if (!mesh_backend_make(name, mesh_col_text(backends, b, "driver"), mesh_col_text(backends, b, "config"),
						   mesh_col_text(backends, b, "credential"), &be))
	{
		note(rows, "reconcile_skipped", NULL, name, "the driver or config is not usable by this build");
		return;
	}
	if (be.driver->needs_credential(be.config) && be.credential == NULL)
	{
		note(rows, "reconcile_skipped", NULL, name, "no credential is set");
		json_decref(be.config);
		return;
	}
	live = reaper_query(live_rows_sql, 1, &backend_param);
	st = mesh_run_begin(&run, &be);
	built = be.driver->list_request(&be, st, install_id, &req, &run.err);
	if (!run_until(&run, built, &req, until, mesh_parse_list, &listing, &merr))
	{
		mesh_run_end(&run);
		note(rows, "backend_unreachable", NULL, name,
			 psprintf("%s; its rows stay as evidence and must be released by hand if it does not come back",
					  merr.message));
		json_decref(be.config);
		return;
	}
	mesh_run_end(&run);
	items = listing.items;
	nitems = listing.nitems;

	/* read after the list: every listed sandbox's row was committed before it was asked for */
	explained = reaper_query(explained_sql, 1, &backend_param);
	for (int i = 0; i < nitems; i++)
		if (explained != NULL && !ref_explained(items[i].ref, explained) && GetCurrentTimestamp() < until)
			release_orphan(rows, &be, items[i].ref, until);
	for (uint64 r = 0; live != NULL && r < live->n; r++)
		settle_row(rows, name, live, r, ref_listed(mesh_col_text(live, r, "external_ref"), items, nitems));
	note(rows, "reconciled", NULL, name, psprintf("%d sandbox(es) listed", nitems));
	json_decref(be.config);
}

static void
reconcile_all(json_t *rows, TimestampTz deadline)
{
	MeshRows   *backends = reaper_query(backends_sql, 0, NULL);

	for (uint64 b = 0; backends != NULL && b < backends->n; b++)
	{
		CHECK_FOR_INTERRUPTS();
		reconcile_backend(rows, backends, b, fair_share(deadline, (int) (backends->n - b)));
	}
}

/*--------------------------------------------------------------------------
 * 4. Snapshots: reclaim retired ones, reconcile each backend's own list
 *--------------------------------------------------------------------------
 */
static const char reclaimable_sql[] =
"SELECT s.id, s.external_ref FROM mesh.snapshot_reclaimable($1, 100) s";

static const char reclaimed_sql[] = "SELECT mesh.snapshot_reclaimed($1)";

/* A capture whose row is older than this and that the backend does not know was interrupted. */
static const char snapshot_reconcile_sql[] =
"SELECT r.failed, r.external_ref, r.snapshot_id "
"  FROM mesh.snapshot_reconcile($1, $2::jsonb, interval '1 minute') r";

/* Deletes snapshot REF on its backend; NULL when it is gone, else why not. */
static const char *
delete_snapshot(const MeshBackend *be, const char *ref, TimestampTz until)
{
	MeshHttpRequest req;
	MeshDriverRun run = {0};
	MeshOpState *st = mesh_run_begin(&run, be);
	MeshError	merr = {0};
	bool		built = be->driver->snapshot_delete_request(be, st, ref, &req, &run.err);
	bool		deleted = run_until(&run, built, &req, until, mesh_parse_snapshot_delete, NULL,
									&merr);

	mesh_run_end(&run);
	return deleted ? NULL : merr.message;
}

/* Retired snapshots no live workspace stands on: deleted on the backend, marked reclaimed. */
static void
reclaim_snapshots(json_t *rows, const MeshBackend *be, TimestampTz until)
{
	MeshParam	backend = mesh_text_param(be->name);
	MeshRows   *retired = reaper_query(reclaimable_sql, 1, &backend);

	for (uint64 r = 0; retired != NULL && r < retired->n; r++)
	{
		int64		id = mesh_col_int64(retired, r, "id");
		char	   *ref = mesh_col_text(retired, r, "external_ref");
		MeshParam	id_param = mesh_int8_param(id);
		const char *failed = GetCurrentTimestamp() >= until ? "the sweep's time is up"
			: ref ? delete_snapshot(be, ref, until) : NULL;

		if (failed)
		{
			note(rows, "snapshot_reclaim_failed", NULL, be->name,
				 psprintf("snapshot " INT64_FORMAT ": %s; retried at the next sweep", id, failed));
			continue;
		}
		(void) reaper_query(reclaimed_sql, 1, &id_param);
		note(rows, "snapshot_reclaimed", NULL, be->name, psprintf("snapshot " INT64_FORMAT, id));
	}
}

/* The backend's snapshots, as mesh.snapshot_reconcile takes them: [{"ref", "state"}]. */
static char *
listed_snapshots_json(const MeshSnapshotListing *listing)
{
	json_t	   *listed = json_array();
	char	   *text;
	char	   *copy;

	for (int i = 0; i < listing->nitems; i++)
		json_array_append_new(listed, json_pack("{s:s,s:s}", "ref", listing->items[i].ref, "state",
												listing->items[i].ready ? "ready" : "capturing"));
	text = json_dumps(listed, JSON_COMPACT);
	json_decref(listed);
	copy = pstrdup(text);
	free(text);
	return copy;
}

/*
 * The backend's list against the rows: rows whose snapshot vanished and
 * interrupted captures are failed; a snapshot no row explains is deleted
 * and logged.
 */
static void
reconcile_snapshots(json_t *rows, const MeshBackend *be, TimestampTz until)
{
	MeshHttpRequest req;
	MeshDriverRun run = {0};
	MeshOpState *st = mesh_run_begin(&run, be);
	MeshSnapshotListing listing = {NULL, 0};
	MeshError	merr = {0};
	bool		built = be->driver->snapshot_list_request(be, st, install_id, &req, &run.err);
	bool		listed_ok = run_until(&run, built, &req, until, mesh_parse_snapshot_list, &listing,
									  &merr);
	MeshParam	p[2];
	MeshRows   *settled;

	/* the items are the driver's own copies: the run's response may go */
	mesh_run_end(&run);
	if (!listed_ok)
	{
		note(rows, "backend_unreachable", NULL, be->name,
			 psprintf("%s; its snapshots are reconciled at a later sweep", merr.message));
		return;
	}
	p[0] = mesh_text_param(be->name);
	p[1] = mesh_text_param(listed_snapshots_json(&listing));
	settled = reaper_query(snapshot_reconcile_sql, 2, p);
	for (uint64 r = 0; settled != NULL && r < settled->n; r++)
	{
		char	   *ref = mesh_col_text(settled, r, "external_ref");
		const char *failed;

		if (mesh_col_bool(settled, r, "failed"))
		{
			note(rows, "snapshot_failed", NULL, be->name,
				 psprintf("snapshot " INT64_FORMAT " (%s): the backend does not have it",
						  mesh_col_int64(settled, r, "snapshot_id"), ref ? ref : "no reference"));
			continue;
		}
		failed = GetCurrentTimestamp() < until ? delete_snapshot(be, ref, until)
			: "the sweep's time is up";
		ereport(LOG, (errmsg("mesh reaper: deleting snapshot %s on backend \"%s\", which no row explains: %s",
							 ref, be->name, failed ? failed : "deleted")));
		note(rows, failed ? "orphan_snapshot_kept" : "orphan_snapshot_deleted", NULL, be->name,
			 failed ? psprintf("%s: %s", ref, failed) : ref);
	}
}

/*
 * Every backend whose driver keeps snapshots, each with its fair share of
 * the time left: its retired snapshots reclaimed, and when RECONCILE its
 * list reconciled with the rows.
 */
static void
sweep_snapshots(json_t *rows, TimestampTz deadline, bool reconcile)
{
	MeshRows   *backends = reaper_query(backends_sql, 0, NULL);

	for (uint64 b = 0; backends != NULL && b < backends->n; b++)
	{
		TimestampTz until = fair_share(deadline, (int) (backends->n - b));
		MeshBackend be;

		CHECK_FOR_INTERRUPTS();
		if (!mesh_backend_make(mesh_col_text(backends, b, "name"), mesh_col_text(backends, b, "driver"),
							   mesh_col_text(backends, b, "config"),
							   mesh_col_text(backends, b, "credential"), &be))
			continue;
		if (be.driver->snapshot_list_request != NULL &&
			!(be.driver->needs_credential(be.config) && be.credential == NULL))
		{
			reclaim_snapshots(rows, &be, until);
			if (reconcile)
				reconcile_snapshots(rows, &be, until);
		}
		json_decref(be.config);
	}
}

/*--------------------------------------------------------------------------
 * The sweep
 *--------------------------------------------------------------------------
 */
static bool
extension_installed(void)
{
	static const char installed_sql[] = "SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'mesh_exec'";
	MeshRows   *rows = reaper_query(installed_sql, 0, NULL);

	return rows != NULL && rows->n > 0;
}

/*
 * One bounded sweep; what it did is appended to rows.  RECLAIM_ONLY: step
 * 4's reclaim alone (a snapshot was retired or freed), bounded alike.
 */
static void
sweep(json_t *rows, bool reclaim_only)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   mesh_reaper_sweep_timeout_ms);
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "mesh sweep",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	pgstat_report_activity(STATE_RUNNING, reclaim_only ? "mesh reaper: reclaiming snapshots"
						   : "mesh reaper: sweeping");
	if (extension_installed())
	{
		/* right after a start, a sweep would find the embedded daemon not yet serving */
		mesh_wait_for_embedded_daemon(deadline);
		if (!reclaim_only)
		{
			fail_lost_execs(rows);
			expire_repository_tokens(rows);
			/* a third of the sweep at most: a backlog of expired history waits for the next one */
			expire_history(rows, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															(deadline - GetCurrentTimestamp()) / 3000));
			warn_expiring(rows);
			release_due(rows, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  (deadline - GetCurrentTimestamp()) / 2000));
			/* two thirds of what is left for the workspaces, the rest for the snapshots */
			reconcile_all(rows, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															(deadline - GetCurrentTimestamp()) / 1500));
		}
		sweep_snapshots(rows, deadline, !reclaim_only);
	}
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/* Set by mesh.snapshot_reclaim_soon() in this transaction: wake the reaper at its commit. */
static bool reclaim_at_commit = false;

/* At commit (not before: the reaper would not see the rows yet), ask the reaper to reclaim. */
static void
reclaim_xact_callback(XactEvent event, void *arg)
{
	if (!reclaim_at_commit)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		pg_atomic_write_u32(&mesh_shared->reclaim_wanted, 1);
		mesh_worker_wake(MESH_REAPER_SLOT);
	}
	if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT &&
		event != XACT_EVENT_PRE_PREPARE)
		reclaim_at_commit = false;	/* committed, aborted or prepared (the sweep then) */
}

/*
 * mesh.snapshot_reclaim_soon(): once the calling transaction commits, the
 * reaper reclaims the retired snapshots no live workspace stands on.
 * Called by the install script's functions that retire a snapshot or
 * release a workspace standing on a retired one; a wake with nothing to
 * reclaim costs one query.
 */
Datum
mesh_snapshot_reclaim_soon(PG_FUNCTION_ARGS)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(reclaim_xact_callback, NULL);
		registered = true;
	}
	reclaim_at_commit = true;
	PG_RETURN_VOID();
}

/* An operator's mesh.sweep(): sweep now and send back what was done. */
static void
serve_sweep_request(dsm_handle handle)
{
	MeshCall   *hdr;
	MeshMsg		request;
	const char *blob;
	shm_mq_handle *mqh;
	dsm_segment *seg = mesh_attach_call(handle, &hdr, &request, &blob, &mqh);
	MeshCallTimes times = {0};
	json_t	   *rows;
	StringInfoData msg;
	size_t		i;
	json_t	   *row;
	MeshSweepReply r;

	if (seg == NULL)
		return;
	times.handoff_ns = mesh_clock_ns() - hdr->queued_at_ns;
	times.worker_txn_ns = mesh_txn_time_ns;
	rows = json_array();
	sweep(rows, false);
	times.worker_txn_ns = mesh_txn_time_ns - times.worker_txn_ns;
	initStringInfo(&msg);
	mesh_msg_begin(&msg, MESH_MSG_REPLY, MESH_OP_SWEEP, sizeof(r));
	r.nrows = (int32) json_array_size(rows);
	r.cells = mesh_msg_add_list(&msg, r.nrows * MESH_SWEEP_COLUMNS);
	json_array_foreach(rows, i, row)
	{
		for (int f = 0; f < MESH_SWEEP_COLUMNS; f++)
			mesh_msg_set_list_item(&msg, r.cells, i * MESH_SWEEP_COLUMNS + f,
								   mesh_msg_add_string(&msg, json_string_value(json_object_get(row, sweep_columns[f]))));
	}
	json_decref(rows);
	mesh_msg_set_fixed(&msg, &r, sizeof(r));
	times.replied_at_ns = mesh_clock_ns();
	mesh_msg_set_times(&msg, &times);
	(void) shm_mq_send(mqh, msg.len, msg.data, false, true);
	pfree(msg.data);
	dsm_detach(seg);
}

static void
log_sweep(json_t *rows)
{
	size_t		i;
	json_t	   *row;
	int			acted = 0;

	json_array_foreach(rows, i, row)
	{
		const char *action = json_string_value(json_object_get(row, "action"));

		if (strcmp(action, "reconciled") != 0)
			acted++;
	}
	if (acted > 0)
		ereport(LOG, (errmsg("mesh reaper: sweep took %d action(s); see mesh.event_log", acted)));
}

static void
reaper_exit(int code, Datum arg)
{
	mesh_worker_detach_slot(MESH_REAPER_SLOT);
}

/* a background worker's entry point, named in its registration (mesh_exec.c) */
PGDLLEXPORT void mesh_reaper_main(Datum arg);

void
mesh_reaper_main(Datum arg)
{
	TimestampTz next_sweep = 0;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	mesh_worker_connect("mesh reaper");
	install_id = MemoryContextStrdup(TopMemoryContext,
									 psprintf(UINT64_FORMAT, GetSystemIdentifier()));
	mesh_http_init();
	mesh_worker_attach_slot(MESH_REAPER_SLOT);
	before_shmem_exit(reaper_exit, (Datum) 0);

	for (;;)
	{
		dsm_handle	handle;
		long		wait_ms;
		bool		due;
		bool		reclaim;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		while (mesh_worker_pop(MESH_REAPER_SLOT, &handle))
			serve_sweep_request(handle);
		due = GetCurrentTimestamp() >= next_sweep;
		reclaim = pg_atomic_exchange_u32(&mesh_shared->reclaim_wanted, 0) != 0;
		if (due || reclaim)
		{
			json_t	   *rows = json_array();

			sweep(rows, !due);	/* a whole sweep reclaims too */
			log_sweep(rows);
			json_decref(rows);
			if (due)
				next_sweep = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 (int64) mesh_reaper_interval_s * 1000);
		}
		wait_ms = (long) ((next_sweep - GetCurrentTimestamp()) / 1000);
		wait_ms = mesh_wait_for_stats(wait_ms);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(wait_ms, 1), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * mesh.sweep(): run a reaper sweep now and return what it did.  The sweep
 * runs in the reaper, not here: its row changes are the reaper's own
 * committed transactions, whatever the calling transaction does.
 */
Datum
mesh_sweep(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StringInfoData req;
	MeshMsg		reply;
	const MeshSweepReply *r;

	InitMaterializedSRF(fcinfo, 0);
	initStringInfo(&req);
	mesh_msg_begin(&req, MESH_MSG_REQUEST, MESH_OP_SWEEP, 0);
	mesh_call_slot(MESH_REAPER_SLOT, "", &req, NULL, 0, 0, &reply);
	r = mesh_msg_fixed(&reply, sizeof(MeshSweepReply));
	for (int i = 0; i < r->nrows; i++)
	{
		Datum		values[MESH_SWEEP_COLUMNS];
		bool		nulls[MESH_SWEEP_COLUMNS];

		for (int f = 0; f < MESH_SWEEP_COLUMNS; f++)
		{
			const char *v = mesh_msg_string(&reply, mesh_msg_list_item(&reply, r->cells,
																	   i * MESH_SWEEP_COLUMNS + f));

			nulls[f] = v == NULL;
			values[f] = v ? CStringGetTextDatum(v) : (Datum) 0;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
