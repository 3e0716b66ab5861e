/*-------------------------------------------------------------------------
 *
 * store.c
 *	  The rows a worker writes, each change in its own short transaction.
 *
 * Invariant 4 (docs/design.md): the row is written before the backend call,
 * and every state change is committed here, by the worker, never in the
 * caller's transaction, so a caller's ROLLBACK cannot erase that a sandbox
 * exists or that compute was spent.  Transactions are short and never span
 * an HTTP wait, so no relation or row lock is held while a backend works.
 *
 * Each move of a workspace or an exec is one of the state-change functions
 * of the install script (mesh.workspace_*, mesh.exec_*, where pgTAP tests
 * them), called with typed parameters through txn.c; what they return is
 * read by column name.  Statuses and reasons come back as the positions of
 * their enum labels (MeshWorkspaceStatus, MeshReasonCode), never as text
 * to compare.
 *
 * Each store_* function returns false with *err set when its transaction
 * failed; the worker turns that into the caller's error.  lock_timeout is
 * set in the worker, so a lock held by the caller itself fails fast.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "credentials.h"
#include "exec_output.h"
#include "store.h"
#include "txn.h"

/* The labels of mesh.workspace_status, indexed by MeshWorkspaceStatus. */
const char *const mesh_workspace_status_names[] = {
	"pending", "acquiring", "ready", "releasing", "released", "failed"
};

/* The labels of mesh.status_reason_code, indexed by MeshReasonCode (NONE: NULL). */
const char *const mesh_reason_code_names[] = {
	NULL, "acquire_interrupted", "acquire_failed", "hibernated_idle", "hibernated_by_backend",
	"found_running", "lost", "budget_exhausted", "release_stuck"
};

/* The labels of mesh.exec_status, indexed by MeshExecStatus. */
const char *const mesh_exec_status_names[] = {
	"running", "ok", "timeout", "cancelled", "oom", "budget_exhausted", "error", "killed"
};

StaticAssertDecl(lengthof(mesh_workspace_status_names) == MESH_WS_FAILED + 1,
				 "mesh_workspace_status_names must match MeshWorkspaceStatus");
StaticAssertDecl(lengthof(mesh_reason_code_names) == MESH_REASON_RELEASE_STUCK + 1,
				 "mesh_reason_code_names must match MeshReasonCode");
StaticAssertDecl(lengthof(mesh_exec_status_names) == MESH_EXEC_KILLED + 1,
				 "mesh_exec_status_names must match MeshExecStatus");

/* A workspace status read back as the position of its label (STATUS_INDEX). */
MeshWorkspaceStatus
mesh_col_status(const MeshRows *rows, uint64 row, const char *name)
{
	int64		v = mesh_col_int64(rows, row, name);

	if (v < MESH_WS_PENDING || v > MESH_WS_FAILED)
		elog(ERROR, "mesh: workspace status %lld is not one this build knows", (long long) v);
	return (MeshWorkspaceStatus) v;
}

/* A reason code read back as the position of its label (REASON_INDEX; 0: none). */
static MeshReasonCode
col_reason(const MeshRows *rows, uint64 row, const char *name)
{
	int64		v = mesh_col_int64(rows, row, name);

	if (v < MESH_REASON_NONE || v > MESH_REASON_RELEASE_STUCK)
		elog(ERROR, "mesh: status reason code %lld is not one this build knows", (long long) v);
	return (MeshReasonCode) v;
}

/*--------------------------------------------------------------------------
 * Declaring a run (mesh_acquire).
 *--------------------------------------------------------------------------
 */
static const char declare_sql[] =
"SELECT d AS row, 'mesh.workspaces'::pg_catalog.regtype::pg_catalog.oid AS row_type "
"  FROM mesh.workspace_declare($1, $2, $3, $4, $5, $6, $7, $8) d";

/*
 * Declare the run; *row is its row.  A plain declaration is intent and
 * commits deferred (losing one in a crash loses nothing real); with an
 * environment it carries grants, and commits durably.
 */
bool
store_declare(const char *run_id, const char *agent_id, const char *actor_id,
			  const char *parent_run_id, const char *environment, const char *owner_role,
			  const char *project, const int64 *from_snapshot, Datum *row, ErrorData **err)
{
	MeshParam	p[8] = {mesh_text_param(run_id), mesh_text_param(agent_id), mesh_text_param(actor_id),
		mesh_text_param(parent_run_id), mesh_text_param(environment),
		owner_role ? mesh_oid_param(atooid(owner_role)) : mesh_null_param(OIDOID),
		mesh_text_param(project),
	from_snapshot ? mesh_int8_param(*from_snapshot) : mesh_null_param(INT8OID)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: declare run", environment ? MESH_COMMIT_DURABLE : MESH_COMMIT_DEFERRED,
					  declare_sql, 8, p, &rows, err))
		return false;
	*row = mesh_row_copy(rows);
	return true;
}

/*--------------------------------------------------------------------------
 * Loading a run's workspace and its backend's catalog entry.
 *--------------------------------------------------------------------------
 */
typedef struct LoadArgs
{
	const char *run_id;
	const char *caller_role;
	MeshWorkspace *ws;
	MeshLoadThen then;
	void	   *then_arg;
	bool		then_wrote;
} LoadArgs;

/*
 * The run's row with everything a call needs of it.  has_grants and
 * token_valid are scalar subqueries, not EXISTS: the planner may turn an
 * EXISTS into a hashed subplan over every live grant or token of the
 * installation, which a load per call cannot afford once runs are many.
 */
static const char load_sql[] =
"SELECT w.id, w.run_id, w.agent_id, w.created_by_actor_id, " STATUS_INDEX("w.status") " AS status, "
"       " REASON_INDEX("w.status_reason_code") " AS reason_code, w.status_reason, "
"       w.backend_kind, w.external_ref, w.size::text AS size, w.capabilities::text AS capabilities, "
"       b.name IS NOT NULL AS backend_found, b.enabled AS backend_enabled, b.driver, "
"       b.config::text AS config, c.credential, w.compute_seconds, "
"       coalesce(l.max_compute_seconds, -1) AS budget_seconds, w.release_outcome, "
"       (SELECT true FROM mesh.grants g WHERE g.run_id = w.run_id AND g.revoked_at IS NULL "
"         LIMIT 1) IS NOT NULL AS has_grants, "
"       (SELECT true FROM mesh.run_tokens t WHERE t.run_id = w.run_id AND t.revoked_at IS NULL "
"               AND t.expires_at > pg_catalog.now() + interval '1 minute' LIMIT 1) IS NOT NULL AS token_valid, "
"       w.egress::text AS egress, s.external_ref AS snapshot_ref "
"  FROM mesh.workspaces w "
"  JOIN mesh.run_limits l ON l.workspace_id = w.id "
"  LEFT JOIN mesh.backends b ON b.name = w.backend_kind "
"  LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
"  LEFT JOIN mesh.snapshots s ON s.id = w.snapshot_id "
" WHERE w.run_id = $1 AND mesh.may_drive(w.owner_role, $2)";

static void
fill_workspace(MeshWorkspace *ws, const MeshRows *r)
{
	ws->id = mesh_col_int64(r, 0, "id");
	ws->run_id = mesh_col_text(r, 0, "run_id");
	ws->agent_id = mesh_col_text(r, 0, "agent_id");
	ws->actor_id = mesh_col_text(r, 0, "created_by_actor_id");
	ws->status = mesh_col_status(r, 0, "status");
	ws->reason_code = col_reason(r, 0, "reason_code");
	ws->status_reason = mesh_col_text(r, 0, "status_reason");
	ws->backend_kind = mesh_col_text(r, 0, "backend_kind");
	ws->external_ref = mesh_col_text(r, 0, "external_ref");
	ws->size = mesh_col_text(r, 0, "size");
	ws->capabilities = mesh_col_text(r, 0, "capabilities");
	mesh_capabilities_parse(ws->capabilities, &ws->caps);
	ws->backend_found = mesh_col_bool(r, 0, "backend_found");
	ws->backend_enabled = mesh_col_bool(r, 0, "backend_enabled");
	ws->driver = mesh_col_text(r, 0, "driver");
	ws->config = mesh_col_text(r, 0, "config");
	ws->credential = mesh_col_text(r, 0, "credential");
	ws->compute_seconds = mesh_col_float8(r, 0, "compute_seconds");
	ws->budget_seconds = mesh_col_float8(r, 0, "budget_seconds");
	ws->release_outcome = mesh_col_text(r, 0, "release_outcome");
	ws->has_grants = mesh_col_bool(r, 0, "has_grants");
	ws->token_valid = mesh_col_bool(r, 0, "token_valid");
	ws->egress = mesh_col_text(r, 0, "egress");
	ws->snapshot_ref = mesh_col_text(r, 0, "snapshot_ref");
}

/*
 * A run another role owns is, to this caller, a run that does not exist.
 * The row is read into the caller's memory, then handed to the caller's
 * then, if any, in the same transaction.
 */
static void
load_body(void *arg)
{
	LoadArgs   *a = (LoadArgs *) arg;
	MeshParam	p[2] = {mesh_text_param(a->run_id),
	a->caller_role ? mesh_oid_param(atooid(a->caller_role)) : mesh_null_param(OIDOID)};
	MeshRows   *rows = mesh_sql(load_sql, 2, p);
	MemoryContext old;

	if (rows->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("run \"%s\" has no workspace declared", a->run_id),
				 errhint("Call mesh_acquire(run_id, agent_id, actor_id) first.")));
	old = MemoryContextSwitchTo(mesh_txn_result_cxt());
	fill_workspace(a->ws, rows);
	MemoryContextSwitchTo(old);
	if (a->then)
		a->then_wrote = a->then(a->ws, a->then_arg);
}

/*
 * Load the run's row; an unknown run is the caller's error, and so is, with
 * run ownership on, a run caller_role (an oid; NULL: the pool's own call)
 * may not drive.  Read-only, so its commit writes and waits for nothing
 * (and MESH_COMMIT_DURABLE spares setting synchronous_commit for it).
 */
bool
store_load(const char *run_id, const char *caller_role, MeshWorkspace *ws, ErrorData **err)
{
	return store_load_then(run_id, caller_role, ws, NULL, NULL, NULL, err);
}

/*
 * store_load, then then(ws, arg) on the row in the same transaction, so
 * that what the caller does next on it (an exec row, say) costs no
 * transaction of its own.  An error of then's fails the whole transaction,
 * load included.  When then wrote, *commit_lsn is where the commit ended:
 * it commits deferred, and the caller makes it durable (worker_want_durable)
 * before it tells anybody; otherwise *commit_lsn is InvalidXLogRecPtr.
 */
bool
store_load_then(const char *run_id, const char *caller_role, MeshWorkspace *ws,
				MeshLoadThen then, void *arg, XLogRecPtr *commit_lsn, ErrorData **err)
{
	LoadArgs	a = {run_id, caller_role, ws, then, arg, false};

	memset(ws, 0, sizeof(*ws));
	if (!mesh_txn("mesh worker: load run", then ? MESH_COMMIT_DEFERRED : MESH_COMMIT_DURABLE,
				  load_body, &a, err))
		return false;
	if (commit_lsn)
		*commit_lsn = a.then_wrote ? mesh_txn_commit_lsn() : InvalidXLogRecPtr;
	return true;
}

/*--------------------------------------------------------------------------
 * Materialization: choose the backend, record it, then call it.
 *--------------------------------------------------------------------------
 */
typedef struct MaterializeArgs
{
	MeshWorkspace *ws;
	const char *install_id;
	const char *needs;			/* the capability the call needs ("shell", "eval"), or NULL */
} MaterializeArgs;

static const char choose_backend_sql[] =
"SELECT backend, implicit, size::text AS size, driver, config, credential "
"  FROM mesh.workspace_choose_backend($1)";

static const char begin_acquire_sql[] =
"SELECT mesh.workspace_begin_acquire($1, $2, $3, $4::mesh.size_tier, $5::jsonb, $6)::text AS egress";

/* Build a MeshBackend from catalog fields; false when the driver is unknown. */
bool
mesh_backend_make(const char *name, const char *driver, const char *config,
				  const char *credential, MeshBackend *be)
{
	memset(be, 0, sizeof(*be));
	if (driver == NULL || (be->driver = mesh_driver_lookup(driver)) == NULL)
		return false;
	be->name = name;
	be->config = json_loads(config ? config : "{}", 0, NULL);
	be->credential = credential;
	be->data_dir = DataDir;
	return be->config != NULL;
}

/* Build a MeshBackend from a loaded row; false when it has no usable entry. */
bool
mesh_backend_from_workspace(const MeshWorkspace *ws, MeshBackend *be)
{
	if (!ws->backend_found)
	{
		memset(be, 0, sizeof(*be));
		return false;
	}
	return mesh_backend_make(ws->backend_kind, ws->driver, ws->config, ws->credential, be);
}

static const char eval_backends_sql[] =
"SELECT b.name, b.driver, b.config::text AS config, c.credential, "
"       least($1::mesh.size_tier, b.max_size)::text AS size "
"  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
" WHERE b.enabled ORDER BY b.catalog_order, b.name";

/*
 * Routing an evaluation by capability, at a run's materialization.  A run's
 * first call picks its backend (mesh.workspace_choose_backend: the
 * agent's pin, else the first enabled backend in catalog order).  When
 * that call is an evaluation (mesh_eval) and the picked backend does not
 * declare eval, the run goes instead to the first enabled backend, in
 * catalog order, whose driver declares it: a run that only evaluates is
 * never given a shell sandbox, and nothing is materialized for it beyond
 * what the isolate backend "acquires" (a health check).  A run is bound to
 * one backend from then on: a run that evaluated cannot run commands, and
 * one that ran a command cannot evaluate unless its backend declares both
 * (each is refused by capability before any backend call).  A harness that
 * needs both uses two runs.
 *
 * NEEDS "eval" on a backend (BE, CAPS) that lacks it: move WS, BE and CAPS
 * to the first enabled backend declaring eval.  Returns true when it did;
 * false leaves everything as it was (the caller's refusal then says why).
 * Runs inside the materialization's transaction.
 */
static bool
route_eval(MeshWorkspace *ws, MeshBackend *be, MeshCapabilities *caps, const char *needs)
{
	MeshParam	size;
	MeshRows   *rows;

	if (needs == NULL || strcmp(needs, "eval") != 0 || caps->eval)
		return false;
	size = mesh_text_param(ws->size);
	rows = mesh_sql(eval_backends_sql, 1, &size);
	for (uint64 i = 0; i < rows->n; i++)
	{
		MeshBackend candidate;
		MeshCapabilities declared;

		if (!mesh_backend_make(mesh_col_text(rows, i, "name"), mesh_col_text(rows, i, "driver"),
							   mesh_col_text(rows, i, "config"), mesh_col_text(rows, i, "credential"),
							   &candidate))
			continue;
		if (candidate.driver->needs_credential(candidate.config) && candidate.credential == NULL)
		{
			json_decref(candidate.config);
			continue;
		}
		candidate.driver->declared_capabilities(&candidate, &declared);
		if (!declared.eval)
		{
			json_decref(candidate.config);
			continue;
		}
		ereport(LOG,
				(errmsg("mesh: run \"%s\" evaluates on backend \"%s\": its agent's backend \"%s\" does not declare eval",
						ws->run_id, candidate.name, ws->backend_kind)));
		json_decref(be->config);
		*be = candidate;
		*caps = declared;
		ws->backend_kind = mesh_col_text(rows, i, "name");
		ws->driver = mesh_col_text(rows, i, "driver");
		ws->config = mesh_col_text(rows, i, "config");
		ws->credential = mesh_col_text(rows, i, "credential");
		ws->size = mesh_col_text(rows, i, "size");
		return true;
	}
	return false;
}

/*
 * A call that needs a capability the chosen backend does not declare is
 * refused here, before anything exists on the backend and before the row
 * moves (the transaction rolls back: the run stays pending), so that a
 * command is never sent to a backend that cannot run it.
 */
static void
refuse_lacking(const MeshWorkspace *ws, const MeshCapabilities *caps, const char *needs)
{
	if (needs == NULL)
		return;
	if (strcmp(needs, "shell") == 0 && !caps->shell)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("backend \"%s\" cannot run commands (it does not declare the shell capability)",
						ws->backend_kind),
				 errhint("Pin this agent to a backend with the shell capability, or use mesh_eval for a snippet.")));
	if (strcmp(needs, "eval") == 0 && !caps->eval)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("backend \"%s\" cannot evaluate snippets (it does not declare the eval capability)",
						ws->backend_kind),
				 errhint("Pin this agent to a backend with the eval capability (the isolate driver).")));
}

/*
 * The backend mesh.workspace_choose_backend picked (within the agent's
 * limit), asked for its capabilities and the workspace's reference, then
 * recorded by mesh.workspace_begin_acquire with the network policy.
 */
static void
materialize_body(void *arg)
{
	MaterializeArgs *a = (MaterializeArgs *) arg;
	MeshWorkspace *ws = a->ws;
	MeshParam	id = mesh_int8_param(ws->id);
	MeshRows   *chosen = mesh_sql(choose_backend_sql, 1, &id);
	MeshRows   *acquiring;
	MeshBackend be;
	MeshCapabilities caps;
	bool		implicit = mesh_col_bool(chosen, 0, "implicit");

	ws->backend_kind = mesh_col_text(chosen, 0, "backend");
	ws->size = mesh_col_text(chosen, 0, "size");
	ws->driver = mesh_col_text(chosen, 0, "driver");
	ws->config = mesh_col_text(chosen, 0, "config");
	ws->credential = mesh_col_text(chosen, 0, "credential");
	ws->backend_found = true;
	ws->backend_enabled = true;
	if (!mesh_backend_from_workspace(ws, &be))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("backend \"%s\" has a driver or config this build cannot use",
						ws->backend_kind),
				 errhint("See mesh.backend_catalog and mesh.drivers().")));
	if (be.driver->needs_credential(be.config) && be.credential == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("backend \"%s\" has no credential set", ws->backend_kind),
				 errhint("An admin sets it with mesh.backend_set_credential().")));

	be.driver->declared_capabilities(&be, &caps);
	/* an evaluation on a backend without eval goes to one with it (route_eval) */
	if (route_eval(ws, &be, &caps, a->needs))
		implicit = true;
	refuse_lacking(ws, &caps, a->needs);
	ws->capabilities = MemoryContextStrdup(mesh_txn_result_cxt(), mesh_capabilities_text(&caps));
	ws->caps = caps;
	ws->external_ref = MemoryContextStrdup(mesh_txn_result_cxt(),
										   be.driver->workspace_ref(&be, a->install_id, ws->id));
	json_decref(be.config);
	{
		MeshParam	p[6] = {id, mesh_text_param(ws->backend_kind), mesh_text_param(ws->external_ref),
			mesh_text_param(ws->size), mesh_text_param(ws->capabilities), mesh_bool_param(implicit)};

		/* before anything exists on the backend: a refusal leaves the row pending */
		acquiring = mesh_sql(begin_acquire_sql, 6, p);
	}
	ws->egress = mesh_col_text(acquiring, 0, "egress");
	/* the snapshot it starts from, or why none (it raises for one that cannot be used) */
	store_snapshot_choose(ws, caps.snapshot);
	if (implicit)
		ereport(LOG,
				(errmsg("mesh: run \"%s\" of agent \"%s\" uses backend \"%s\", the instance default (the agent has no pin)",
						ws->run_id, ws->agent_id, ws->backend_kind)));
	ws->status = MESH_WS_ACQUIRING;
}

/*
 * Record the choice of backend and the move to acquiring, before the
 * backend is called.  commit says how: the worker that defers it makes
 * mesh_txn_commit_lsn() durable before its loop's turn sends anything
 * (worker_want_durable; docs/design.md, invariant 4: the row is durable
 * before the caller hears of a sandbox).
 */
bool
store_begin_materialize(MeshWorkspace *ws, const char *install_id, const char *needs,
						MeshCommit commit, ErrorData **err)
{
	MaterializeArgs a = {ws, install_id, needs};

	return mesh_txn("mesh worker: materialize", commit, materialize_body, &a, err);
}

static const char acquired_sql[] =
"SELECT mesh.workspace_acquired($1, $2::jsonb)";

/* The backend made or woke the sandbox: ready, with what it can do. */
bool
store_materialized(MeshWorkspace *ws, const MeshCapabilities *caps, MeshCommit commit, ErrorData **err)
{
	char	   *caps_text = mesh_capabilities_text(caps);
	MeshParam	p[2] = {mesh_int8_param(ws->id), mesh_text_param(caps_text)};

	if (!mesh_txn_sql("mesh worker: workspace ready", commit, acquired_sql, 2, p, NULL, err))
		return false;
	ws->status = MESH_WS_READY;
	ws->reason_code = MESH_REASON_NONE;
	ws->status_reason = NULL;
	ws->capabilities = caps_text;
	ws->caps = *caps;
	return true;
}

static const char acquire_failed_sql[] =
"SELECT mesh.workspace_acquire_failed($1, $2, $3)";

/*
 * An acquisition failed: retryable failures (backend unreachable, a garbled
 * answer) put the row back to pending, others fail the workspace
 * (mesh.workspace_acquire_failed says why each).
 */
bool
store_materialize_failed(MeshWorkspace *ws, bool retryable, const char *reason, ErrorData **err)
{
	MeshParam	p[3] = {mesh_int8_param(ws->id), mesh_bool_param(retryable), mesh_text_param(reason)};

	return mesh_txn_sql("mesh worker: acquire failed", MESH_COMMIT_DURABLE, acquire_failed_sql, 3, p,
						NULL, err);
}

/*--------------------------------------------------------------------------
 * Execs.
 *--------------------------------------------------------------------------
 */
typedef struct ExecStartArgs
{
	MeshWorkspace *ws;
	const MeshExecSpec *spec;
	int64		exec_id;
	List	   *delivered;
} ExecStartArgs;

/* Secrets the run's grants deliver as environment, counted as reads. */
static const char delivered_sql[] =
"WITH d AS ("
"  UPDATE mesh.grants g SET uses = uses + 1, last_used_at = pg_catalog.now(), "
"         first_used_at = coalesce(first_used_at, pg_catalog.now()) "
"    FROM mesh.workspaces w, mesh.secrets s "
"   WHERE g.run_id = $1 AND w.run_id = g.run_id AND s.agent_id = w.agent_id AND s.name = g.name "
"     AND g.kind = 'secret' AND g.deliver_as IS NOT NULL AND g.revoked_at IS NULL "
"     AND (g.expires_at IS NULL OR g.expires_at > pg_catalog.now()) "
"  RETURNING g.deliver_as, g.name, s.value) "
"SELECT deliver_as AS variable, name, value FROM d";

/*
 * The other secrets the run may fetch from the broker: not delivered (and
 * so not a read), but their values are redacted from the exec's output all
 * the same, so no secret a run could see ever lands in an exec row.
 */
static const char redact_only_sql[] =
"SELECT NULL::text AS variable, g.name, s.value FROM mesh.grants g "
"  JOIN mesh.workspaces w ON w.run_id = g.run_id "
"  JOIN mesh.secrets s ON s.agent_id = w.agent_id AND s.name = g.name "
" WHERE g.run_id = $1 AND g.kind = 'secret' "
"   AND NOT (g.deliver_as IS NOT NULL AND g.revoked_at IS NULL "
"            AND (g.expires_at IS NULL OR g.expires_at > pg_catalog.now()))";

static const char delivered_event_sql[] =
"INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"SELECT 'secret_read', $1, $2, $3, "
"       pg_catalog.jsonb_build_object('secret', x, 'delivered_as_env', true, 'exec_id', $4) "
"  FROM pg_catalog.unnest($5) x";

/* Append the secrets in rows to a->delivered; the names of delivered ones to *names. */
static void
collect_secrets(ExecStartArgs *a, const MeshRows *rows, List **names)
{
	MemoryContext old = MemoryContextSwitchTo(mesh_txn_result_cxt());

	for (uint64 r = 0; r < rows->n; r++)
	{
		MeshDelivered *d = palloc0(sizeof(MeshDelivered));

		d->variable = mesh_col_text(rows, r, "variable");
		d->name = mesh_col_text(rows, r, "name");
		d->value = mesh_col_text(rows, r, "value");
		a->delivered = lappend(a->delivered, d);
		if (names && d->variable)
			*names = lappend(*names, d->name);
	}
	MemoryContextSwitchTo(old);
}

static void
fetch_delivered(ExecStartArgs *a)
{
	MeshParam	run = mesh_text_param(a->ws->run_id);
	List	   *names = NIL;

	collect_secrets(a, mesh_sql(delivered_sql, 1, &run), &names);
	if (names != NIL)
	{
		const char **v = palloc(sizeof(char *) * list_length(names));
		MeshParam	p[5] = {run, mesh_int8_param(a->ws->id), mesh_text_param(a->ws->backend_kind),
		mesh_int8_param(a->exec_id), {0}};
		ListCell   *lc;

		foreach(lc, names)
			v[foreach_current_index(lc)] = lfirst(lc);
		p[4] = mesh_text_array_param(v, list_length(names));
		mesh_sql(delivered_event_sql, 5, p);
	}
	collect_secrets(a, mesh_sql(redact_only_sql, 1, &run), NULL);
}

static const char exec_begin_sql[] =
"SELECT mesh.exec_begin($1, $2, $3, $4, $5, $6, $7) AS exec_id";

static const char exec_argv_redacted_sql[] =
"UPDATE mesh.execs SET argv = $2 WHERE id = $1";

/*
 * A secret the run may see never stays in its exec row, not even in argv
 * (the command itself gets argv as given).  One more statement, only when
 * a value really is in it.
 */
static void
redact_argv(ExecStartArgs *a)
{
	const char **argv = palloc(sizeof(char *) * Max(a->spec->argc, 1));
	bool		changed = false;
	ListCell   *lc;

	for (int i = 0; i < a->spec->argc; i++)
	{
		char	   *arg = pstrdup(a->spec->argv[i]);
		size_t		len = strlen(arg);

		foreach(lc, a->delivered)
		{
			MeshDelivered *d = lfirst(lc);

			mesh_redact(&arg, &len, d->value, d->variable ? d->variable : d->name);
		}
		changed |= strcmp(arg, a->spec->argv[i]) != 0;
		argv[i] = arg;
	}
	if (changed)
	{
		MeshParam	p[2] = {mesh_int8_param(a->exec_id), mesh_text_array_param(argv, a->spec->argc)};

		mesh_sql(exec_argv_redacted_sql, 2, p);
	}
}

/* The names of the exec's environment variables (never their values). */
static MeshParam
env_names_param(const MeshExecSpec *spec)
{
	const char **names;
	const char *key;
	json_t	   *value;
	int			n = 0;

	if (spec->env == NULL)
		return mesh_null_param(TEXTARRAYOID);
	names = palloc(sizeof(char *) * Max(json_object_size(spec->env), 1));
	json_object_foreach(spec->env, key, value)
		names[n++] = key;
	return mesh_text_array_param(names, n);
}

static void
exec_start_body(void *arg)
{
	ExecStartArgs *a = (ExecStartArgs *) arg;
	MeshParam	p[7] = {mesh_int8_param(a->ws->id), mesh_text_array_param(a->spec->argv, a->spec->argc),
		mesh_text_param(a->spec->dir), env_names_param(a->spec),
		mesh_int4_param((int32) Min(a->spec->stdin_len, (size_t) PG_INT32_MAX)),
		mesh_int8_param(a->spec->timeout_ms), mesh_bool_param(a->spec->background)};

	a->exec_id = mesh_col_int64(mesh_sql(exec_begin_sql, 7, p), 0, "exec_id");
	if (a->ws->has_grants)
	{
		fetch_delivered(a);
		redact_argv(a);
	}
}

/*
 * The exec row, committed before the command is sent.  The commit does not
 * wait for its WAL flush: the worker writes (a background command's: flushes)
 * the WAL to *commit_lsn before the request leaves, once for all the calls of
 * a turn of its loop (keep_exec_row), so a command never runs without its row
 * in the WAL files.
 */
bool
store_exec_started(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id,
				   XLogRecPtr *commit_lsn, List **delivered, ErrorData **err)
{
	ExecStartArgs a = {ws, spec, 0, NIL};

	if (!mesh_txn("mesh worker: exec started", MESH_COMMIT_DEFERRED, exec_start_body, &a, err))
		return false;
	*exec_id = a.exec_id;
	*commit_lsn = mesh_txn_commit_lsn();
	*delivered = a.delivered;
	return true;
}

/*
 * The exec row, written in the transaction running now: the then of
 * store_load_then, whose commit carries it (deferred, as above).
 */
void
store_exec_start_here(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id, List **delivered)
{
	ExecStartArgs a = {ws, spec, 0, NIL};

	exec_start_body(&a);
	*exec_id = a.exec_id;
	*delivered = a.delivered;
}

static const char mint_sql[] =
"SELECT mesh.run_token_mint($1, pg_catalog.decode($2, 'hex'))";

/* Record a new run token (its hash) before it is handed to the workspace. */
bool
store_mint_token(MeshWorkspace *ws, const char *hash_hex, ErrorData **err)
{
	MeshParam	p[2] = {mesh_int8_param(ws->id), mesh_text_param(hash_hex)};

	return mesh_txn_sql("mesh worker: mint run token", MESH_COMMIT_DURABLE, mint_sql, 2, p, NULL, err);
}

static const char exec_finish_sql[] =
"SELECT mesh.exec_finish($1, $2::mesh.exec_status, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14)";

typedef struct ExecFinishArgs
{
	int64		exec_id;
	MeshParam  *params;			/* [13], the stored output's bytes, is filled here */
	const MeshOutputStream *output;
	const char *notify;
	const char *output_stopped;	/* out: why storing the output stopped short */
} ExecFinishArgs;

static void
exec_finish_body(void *arg)
{
	ExecFinishArgs *a = (ExecFinishArgs *) arg;
	int64		stored = 0;

	/* the output first: its stored bytes are charged with the end, in one update */
	if (a->output)
		a->output_stopped = exec_output_store(a->exec_id, a->output, &stored);
	a->params[13] = mesh_int8_param(stored);
	(void) mesh_sql(exec_finish_sql, 14, a->params);
	if (a->notify)
		Async_Notify(store_exec_channel(a->exec_id), a->notify);
}

/*
 * Record how an exec ended and charge the run, with each outbound connection
 * the backend refused during it (mesh.exec_finish), and its output stored
 * whole (rec->output, exec_output.c), in one transaction.  Committed
 * asynchronously: the worker flushes the WAL up to *commit_lsn before the
 * caller hears of it, once for all the results of a turn of its loop
 * (worker_want_durable).  stdout and stderr in rec->result must already be
 * sanitized text.  *output_stopped (when asked for) says why storing the
 * output stopped short, or is NULL.
 */
bool
store_exec_finished(int64 exec_id, const MeshExecRecord *rec, XLogRecPtr *commit_lsn,
					const char **output_stopped, ErrorData **err)
{
	const MeshExecResult *r = rec->result;
	MeshParam	p[14] = {
		mesh_int8_param(exec_id),
		mesh_text_param(mesh_exec_status_names[rec->status]),
		r ? mesh_int4_param(r->exit_code) : mesh_null_param(INT4OID),
		mesh_text_param(r ? r->stdout_data : NULL),
		mesh_text_param(r ? r->stderr_data : NULL),
		r ? mesh_bool_param(r->truncated) : mesh_null_param(BOOLOID),
		r ? mesh_float8_param(r->wall_seconds) : mesh_null_param(FLOAT8OID),
		r && r->cpu_metered ? mesh_float8_param(r->cpu_seconds) : mesh_null_param(FLOAT8OID),
		mesh_float8_param(rec->charged_seconds),
		mesh_text_param(rec->charge_basis),
		mesh_text_param(rec->error),
		r && r->memory_peak_known ? mesh_int8_param(r->memory_peak_bytes) : mesh_null_param(INT8OID),
		mesh_text_param(r ? r->egress_denials : NULL)
	};

	ExecFinishArgs a = {exec_id, p, rec->output, rec->notify, NULL};

	if (!mesh_txn("mesh worker: exec finished", MESH_COMMIT_DEFERRED, exec_finish_body, &a, err))
		return false;
	*commit_lsn = mesh_txn_commit_lsn();
	if (output_stopped)
		*output_stopped = a.output_stopped;
	return true;
}

/*--------------------------------------------------------------------------
 * The OOM-aware tier climb (mesh.tier_climb_on_oom/_on_release).  Each runs
 * in a transaction of its own, after the exec's end or the release is
 * committed: bookkeeping on the agent's row must never cost the record of
 * what happened (say, when the caller holds a lock on that row).
 *--------------------------------------------------------------------------
 */
static const char climb_on_oom_sql[] =
"SELECT mesh.tier_climb_on_oom($1) AS notice";

static const char climb_on_release_sql[] =
"SELECT mesh.tier_climb_on_release($1)";

/*
 * An exec recorded oom raises its agent's tier, once per run; *notice says
 * what happened, for the caller.
 */
bool
store_tier_climb_on_oom(int64 exec_id, char **notice, ErrorData **err)
{
	MeshParam	p = mesh_int8_param(exec_id);
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: tier climb", MESH_COMMIT_DURABLE, climb_on_oom_sql, 1, &p, &rows, err))
		return false;
	*notice = mesh_col_text(rows, 0, "notice");
	return true;
}

/*
 * A released run may be a clean one that counts towards resetting a climb.
 * Committed deferred: a count lost in a crash only delays a reset.
 */
static void
count_clean_run(MeshWorkspace *ws)
{
	MeshParam	p = mesh_int8_param(ws->id);
	ErrorData  *err;

	if (ws->size == NULL)		/* never materialized: it ran nothing */
		return;
	if (mesh_txn_sql("mesh worker: tier climb reset", MESH_COMMIT_DEFERRED, climb_on_release_sql, 1, &p,
					 NULL, &err))
		return;
	ereport(LOG,
			(errmsg("mesh: run \"%s\" was not counted towards resetting its agent's tier climb: %s",
					ws->run_id, err->message)));
	FreeErrorData(err);
}

/*--------------------------------------------------------------------------
 * File reads and writes are events.
 *--------------------------------------------------------------------------
 */
static const char file_event_sql[] =
"SELECT mesh.workspace_file_event($1, $2, $3, $4, $5)";

bool
store_file_event(MeshWorkspace *ws, const char *kind, const char *path, int64 bytes,
				 const char *failure, ErrorData **err)
{
	MeshParam	p[5] = {mesh_int8_param(ws->id), mesh_text_param(kind), mesh_text_param(path),
	mesh_int8_param(bytes), mesh_text_param(failure)};

	return mesh_txn_sql("mesh worker: file event", MESH_COMMIT_DURABLE, file_event_sql, 5, p, NULL, err);
}

/*--------------------------------------------------------------------------
 * Hibernation, waking, budgets and release.
 *--------------------------------------------------------------------------
 */
static const char idle_hibernated_sql[] =
"SELECT mesh.workspace_idle_hibernated($1)";

/*
 * An idle workspace was hibernated: the run keeps it (backend and reference
 * stay recorded) and goes back to pending, so its next call wakes it.
 */
bool
store_idle_hibernated(MeshWorkspace *ws, ErrorData **err)
{
	MeshParam	p = mesh_int8_param(ws->id);

	if (!mesh_txn_sql("mesh worker: hibernated", MESH_COMMIT_DURABLE, idle_hibernated_sql, 1, &p, NULL, err))
		return false;
	ws->status = MESH_WS_PENDING;
	ws->reason_code = MESH_REASON_HIBERNATED_IDLE;
	return true;
}

static const char begin_wake_sql[] =
"SELECT mesh.workspace_begin_wake($1)";

/*
 * A hibernated workspace (or an interrupted acquire) is about to be woken:
 * acquiring first, committed as commit says (see store_begin_materialize).
 */
bool
store_begin_wake(MeshWorkspace *ws, MeshCommit commit, ErrorData **err)
{
	MeshParam	p = mesh_int8_param(ws->id);

	if (!mesh_txn_sql("mesh worker: waking", commit, begin_wake_sql, 1, &p, NULL, err))
		return false;
	ws->status = MESH_WS_ACQUIRING;
	ws->reason_code = MESH_REASON_NONE;
	return true;
}

static const char budget_exhausted_sql[] =
"SELECT mesh.workspace_budget_exhausted($1, $2, $3) AS reason";

/*
 * The run spent its compute budget: its workspace becomes failed, a terminal
 * status whose reason says what was allowed and what was used.
 */
bool
store_budget_exhausted(MeshWorkspace *ws, double used, ErrorData **err)
{
	MeshParam	p[3] = {mesh_int8_param(ws->id), mesh_float8_param(used), mesh_float8_param(ws->budget_seconds)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: budget exhausted", MESH_COMMIT_DURABLE, budget_exhausted_sql, 3, p,
					  &rows, err))
		return false;
	ws->status = MESH_WS_FAILED;
	ws->reason_code = MESH_REASON_BUDGET_EXHAUSTED;
	ws->status_reason = mesh_col_text(rows, 0, "reason");
	return true;
}

static const char begin_release_sql[] =
"SELECT " STATUS_INDEX("mesh.workspace_begin_release($1, $2, $3::oid)") " AS status";

/*
 * The move to releasing is committed before the backend is asked.  caller
 * (an oid as text; NULL for the reaper's and the worker's own releases)
 * tells an administrator's release from the owner's (end_reason 'admin').
 */
bool
store_begin_release(MeshWorkspace *ws, const char *reason, const char *caller, ErrorData **err)
{
	MeshParam	p[3] = {mesh_int8_param(ws->id), mesh_text_param(reason), mesh_text_param(caller)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: releasing", MESH_COMMIT_DURABLE, begin_release_sql, 3, p, &rows, err))
		return false;
	ws->status = mesh_col_status(rows, 0, "status");
	return true;
}

static const char released_sql[] =
"SELECT " STATUS_INDEX("mesh.workspace_released($1, $2, $3)") " AS status";

bool
store_released(MeshWorkspace *ws, const char *outcome, const char *reason, ErrorData **err)
{
	MeshParam	p[3] = {mesh_int8_param(ws->id), mesh_text_param(outcome), mesh_text_param(reason)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: released", MESH_COMMIT_DURABLE, released_sql, 3, p, &rows, err))
		return false;
	count_clean_run(ws);
	ws->status = mesh_col_status(rows, 0, "status");
	ws->release_outcome = (char *) outcome;
	return true;
}

static const char release_stuck_sql[] =
"SELECT mesh.workspace_release_stuck($1, $2, $3, $4)";

/*
 * A release could not reach the backend, or reached it and could not finish
 * (answered: the backend killed everything but could not remove every file).
 * The row stays live, as evidence, with the reason, and the reaper retries;
 * "must be released by hand" when no catalog entry or credential is left to
 * reach it with.
 */
bool
store_release_stuck(MeshWorkspace *ws, const char *why, bool answered, ErrorData **err)
{
	MeshParam	p[4] = {mesh_int8_param(ws->id), mesh_text_param(why), mesh_bool_param(answered),
	mesh_bool_param(!ws->backend_found)};

	return mesh_txn_sql("mesh worker: release failed", MESH_COMMIT_DURABLE, release_stuck_sql, 4, p, NULL, err);
}

/*--------------------------------------------------------------------------
 * Execs no worker will finish (mesh.fail_lost_execs): the restarted
 * worker's own, and, for the reaper, any past its timeout.
 *--------------------------------------------------------------------------
 */
static const char recover_execs_sql[] =
"SELECT l.exec_id, w.external_ref, w.backend_kind, b.driver, b.config::text AS config, c.credential "
"  FROM mesh.fail_lost_execs('restart', $1, $2) l JOIN mesh.workspaces w ON w.id = l.workspace_id "
"  LEFT JOIN mesh.backends b ON b.name = w.backend_kind "
"  LEFT JOIN mesh.backend_credentials c ON c.backend = b.name";

/*
 * Execs this worker owned that were running when it or the server died are
 * failed with a reason and charged for the wall time they may have used (at
 * most their timeout).  *interrupted lists them, so their commands can be
 * killed in case the backend still runs them.
 */
bool
store_recover_after_restart(int worker_index, int nworkers, List **interrupted, ErrorData **err)
{
	MeshParam	p[2] = {mesh_int4_param(worker_index), mesh_int4_param(nworkers)};
	MeshRows   *rows;

	*interrupted = NIL;
	if (!mesh_txn_sql("mesh worker: recovery", MESH_COMMIT_DURABLE, recover_execs_sql, 2, p, &rows, err))
		return false;
	if (rows->n > 0)
		ereport(LOG,
				(errmsg("mesh: marked %llu interrupted exec(s) as failed", (unsigned long long) rows->n)));
	for (uint64 r = 0; r < rows->n; r++)
	{
		MeshInterruptedExec *ie = palloc0(sizeof(MeshInterruptedExec));

		ie->exec_id = mesh_col_int64(rows, r, "exec_id");
		ie->ref = mesh_col_text(rows, r, "external_ref");
		ie->backend = mesh_col_text(rows, r, "backend_kind");
		ie->driver = mesh_col_text(rows, r, "driver");
		ie->config = mesh_col_text(rows, r, "config");
		ie->credential = mesh_col_text(rows, r, "credential");
		*interrupted = lappend(*interrupted, ie);
	}
	return true;
}

static const char timed_out_execs_sql[] =
"SELECT exec_id, run_id FROM mesh.fail_lost_execs('timeout')";

/*
 * The reaper's part: any exec a minute past its timeout that no worker
 * finished is failed and charged the same way; *lost lists them.
 */
bool
store_fail_timed_out_execs(List **lost, ErrorData **err)
{
	MeshRows   *rows;

	*lost = NIL;
	if (!mesh_txn_sql("mesh reaper: lost execs", MESH_COMMIT_DURABLE, timed_out_execs_sql, 0, NULL, &rows, err))
		return false;
	for (uint64 r = 0; r < rows->n; r++)
	{
		MeshLostExec *le = palloc0(sizeof(MeshLostExec));

		le->exec_id = mesh_col_int64(rows, r, "exec_id");
		le->run_id = mesh_col_text(rows, r, "run_id");
		*lost = lappend(*lost, le);
	}
	return true;
}
