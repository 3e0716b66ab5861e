/*-------------------------------------------------------------------------
 *
 * store.c
 *	  The rows a worker writes, each change in its own short transaction.
 *
 * Invariant 4 (docs/design.md): the row is written before the backend call, and every state
 * change is committed here, by the worker, never in the caller's
 * transaction, so a caller's ROLLBACK cannot erase that a sandbox exists or
 * that compute was spent.  Transactions are short and never span an HTTP
 * wait, so no relation or row lock is held while a backend works.
 *
 * Each store_* function returns false with *err set when its transaction
 * failed; the worker turns that into the caller's error.  lock_timeout is
 * set in the worker, so a lock held by the caller itself fails fast.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "credentials.h"
#include "handoff.h"
#include "store.h"
#include "txn.h"

static char *
int64_text(int64 v)
{
	return psprintf(INT64_FORMAT, v);
}

/*--------------------------------------------------------------------------
 * Declaring a run (mesh_acquire): intent only, committed asynchronously.
 *--------------------------------------------------------------------------
 */
typedef struct DeclareArgs
{
	const char *args[6];
	Datum		row;			/* the mesh.workspaces row, a composite datum */
} DeclareArgs;

static const char declare_insert_sql[] =
"INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, parent_run_id, environment, owner_role) "
"VALUES ($1, $2, $3, $4, $5, $6::oid::regrole) ON CONFLICT (run_id) DO NOTHING "
"RETURNING workspaces";

static const char declare_existing_sql[] =
"SELECT w, agent_id, created_by_actor_id, coalesce(parent_run_id, '(none)'), "
"       agent_id = $2 AND created_by_actor_id = $3 AND parent_run_id IS NOT DISTINCT FROM $4 "
"       AND environment IS NOT DISTINCT FROM $5, coalesce(environment, '(none)'), "
"       mesh.may_drive(owner_role, $6::oid) "
"  FROM mesh.workspaces w WHERE run_id = $1";

/* The environment's needs, checked against what the agent really has. */
static const char environment_check_sql[] =
"SELECT e.name IS NOT NULL, "
"       (SELECT pg_catalog.string_agg(n->>'name', ', ') FROM pg_catalog.jsonb_array_elements(e.needs) n "
"         WHERE n->>'kind' = 'secret' AND NOT EXISTS "
"               (SELECT 1 FROM mesh.secrets s WHERE s.agent_id = $2 AND s.name = n->>'name')) "
"  FROM (SELECT $1::text AS wanted) x LEFT JOIN mesh.environments e ON e.name = x.wanted";

static const char grants_insert_sql[] =
"INSERT INTO mesh.grants (run_id, kind, name, scope, deliver_as, expires_at) "
"SELECT $1, n->>'kind', n->>'name', n->>'scope', n->>'as', "
"       CASE WHEN n ? 'ttl' THEN pg_catalog.now() + (n->>'ttl')::interval END "
"  FROM mesh.environments e, pg_catalog.jsonb_array_elements(e.needs) n WHERE e.name = $2 "
"ON CONFLICT (run_id, kind, name) DO NOTHING";

/* The run's declaration becomes its grants: what it could ever see. */
static void
declare_grants(DeclareArgs *a)
{
	const char *check[2] = {a->args[4], a->args[1]};
	const char *grant[2] = {a->args[0], a->args[4]};
	char	   *missing;

	mesh_sql(environment_check_sql, 2, check);
	if (strcmp(mesh_sql_value(0, 1), "t") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("environment \"%s\" is not declared", a->args[4]),
				 errhint("An admin declares it with mesh.environment_set(name, needs).")));
	missing = mesh_sql_value(0, 2);
	if (missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("environment \"%s\" needs secret(s) %s, which agent \"%s\" does not have",
						a->args[4], missing, a->args[1]),
				 errhint("An admin sets them with mesh.secret_set(agent_id, name, value).")));
	mesh_sql(grants_insert_sql, 2, grant);
}

static void
declare_body(void *arg)
{
	DeclareArgs *a = (DeclareArgs *) arg;

	if (mesh_sql(declare_insert_sql, 6, a->args) == 1)
	{
		a->row = mesh_sql_datum(0, 1);
		if (a->args[4])
			declare_grants(a);
		return;
	}
	mesh_sql(declare_existing_sql, 6, a->args);
	if (strcmp(mesh_sql_value(0, 7), "t") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("run \"%s\" is already declared by another role", a->args[0]),
				 errhint("Run ownership is on: use a new run_id.")));
	if (strcmp(mesh_sql_value(0, 5), "t") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("run \"%s\" is already declared with a different agent, actor, parent or environment",
						a->args[0]),
				 errdetail("It was declared by agent \"%s\" for actor \"%s\" with parent run %s and environment %s.",
						   mesh_sql_value(0, 2), mesh_sql_value(0, 3), mesh_sql_value(0, 4), mesh_sql_value(0, 6)),
				 errhint("A run has one workspace; use a new run_id for different work.")));
	a->row = mesh_sql_datum(0, 1);
}

bool
store_declare(const char *run_id, const char *agent_id, const char *actor_id,
			  const char *parent_run_id, const char *environment, const char *owner_role,
			  Datum *row, ErrorData **err)
{
	DeclareArgs a = {{run_id, agent_id, actor_id, parent_run_id, environment, owner_role}, (Datum) 0};

	/* with grants the declaration is more than intent: commit it durably */
	if (!mesh_txn("mesh worker: declare run", declare_body, &a, environment == NULL, err))
		return false;
	*row = a.row;
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
	bool		found;
	bool		for_update;
} LoadArgs;

static const char load_sql[] =
"SELECT w.id, w.run_id, w.agent_id, w.created_by_actor_id, w.status, w.status_reason, "
"       w.backend_kind, w.external_ref, w.size, w.capabilities::text, "
"       b.name IS NOT NULL, b.enabled, b.driver, b.config::text, c.credential, "
"       w.compute_seconds, coalesce(l.max_compute_seconds, -1), w.release_outcome, "
"       EXISTS (SELECT 1 FROM mesh.grants g WHERE g.run_id = w.run_id AND g.revoked_at IS NULL), "
"       EXISTS (SELECT 1 FROM mesh.run_tokens t WHERE t.run_id = w.run_id AND t.revoked_at IS NULL "
"               AND t.expires_at > pg_catalog.now() + interval '1 minute'), "
"       w.egress::text, mesh.may_drive(w.owner_role, $2::oid) "
"  FROM mesh.workspaces w "
"  JOIN mesh.run_limits l ON l.workspace_id = w.id "
"  LEFT JOIN mesh.backends b ON b.name = w.backend_kind "
"  LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
" WHERE w.run_id = $1";

static const char lock_sql[] =
"SELECT 1 FROM mesh.workspaces WHERE run_id = $1 FOR UPDATE";

static void
fill_workspace(MeshWorkspace *ws)
{
	char	   *v;

	ws->id = pg_strtoint64(mesh_sql_value(0, 1));
	ws->run_id = mesh_sql_value(0, 2);
	ws->agent_id = mesh_sql_value(0, 3);
	ws->actor_id = mesh_sql_value(0, 4);
	ws->status = mesh_sql_value(0, 5);
	ws->status_reason = mesh_sql_value(0, 6);
	ws->backend_kind = mesh_sql_value(0, 7);
	ws->external_ref = mesh_sql_value(0, 8);
	ws->size = mesh_sql_value(0, 9);
	ws->capabilities = mesh_sql_value(0, 10);
	ws->backend_found = strcmp(mesh_sql_value(0, 11), "t") == 0;
	v = mesh_sql_value(0, 12);
	ws->backend_enabled = v && strcmp(v, "t") == 0;
	ws->driver = mesh_sql_value(0, 13);
	ws->config = mesh_sql_value(0, 14);
	ws->credential = mesh_sql_value(0, 15);
	ws->compute_seconds = strtod(mesh_sql_value(0, 16), NULL);
	ws->budget_seconds = strtod(mesh_sql_value(0, 17), NULL);
	ws->release_outcome = mesh_sql_value(0, 18);
	ws->has_grants = strcmp(mesh_sql_value(0, 19), "t") == 0;
	ws->token_valid = strcmp(mesh_sql_value(0, 20), "t") == 0;
	ws->egress = mesh_sql_value(0, 21);
}

static void
load_body(void *arg)
{
	LoadArgs   *a = (LoadArgs *) arg;
	const char *args[2] = {a->run_id, a->caller_role};

	if (a->for_update && mesh_sql(lock_sql, 1, args) == 0)
		return;
	/* a run another role owns is, to this caller, a run that does not exist */
	a->found = mesh_sql(load_sql, 2, args) == 1 && strcmp(mesh_sql_value(0, 22), "t") == 0;
	if (a->found)
		fill_workspace(a->ws);
}

/*
 * Load the run's row; an unknown run is the caller's error, and so is, with
 * run ownership on, a run caller_role (an oid; NULL: the pool's own call)
 * may not drive.
 */
bool
store_load(const char *run_id, const char *caller_role, MeshWorkspace *ws, ErrorData **err)
{
	LoadArgs	a = {run_id, caller_role, ws, false, false};

	memset(ws, 0, sizeof(*ws));
	if (!mesh_txn("mesh worker: load run", load_body, &a, false, err))
		return false;
	if (!a.found)
	{
		MemoryContext cxt = CurrentMemoryContext;

		PG_TRY();
		{
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("run \"%s\" has no workspace declared", run_id),
					 errhint("Call mesh_acquire(run_id, agent_id, actor_id) first.")));
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(cxt);
			*err = CopyErrorData();
			FlushErrorState();
		}
		PG_END_TRY();
		return false;
	}
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
} MaterializeArgs;

static const char select_sql[] =
"SELECT s.backend, s.implicit, s.size FROM mesh.select_backend($1) s";

static const char mark_acquiring_sql[] =
"UPDATE mesh.workspaces SET status = 'acquiring', backend_kind = $2, external_ref = $3, "
"       size = $4::mesh.size_tier, capabilities = $5::jsonb, egress = $6::jsonb, "
"       status_reason = NULL "
" WHERE id = $1::bigint";

/* The workspace's network policy, decided by SQL (it raises on a refusal). */
static const char egress_sql[] =
"SELECT mesh.workspace_egress($1, $2::jsonb)::text";

static const char event_sql[] =
"INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"VALUES ($1, $2, $3::bigint, $4, coalesce($5::jsonb, '{}'))";

static const char touch_sql[] =
"UPDATE mesh.workspaces SET last_used_at = pg_catalog.now() WHERE id = $1::bigint";

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

static const char agent_ensure_sql[] =
"INSERT INTO mesh.agents (agent_id) VALUES ($1) ON CONFLICT DO NOTHING";

static const char agent_lock_sql[] =
"SELECT max_concurrent_workspaces FROM mesh.agents WHERE agent_id = $1 FOR UPDATE";

static const char agent_live_sql[] =
"SELECT pg_catalog.count(*) FROM mesh.workspaces "
" WHERE agent_id = $1 AND status OPERATOR(pg_catalog.=) ANY ('{acquiring,ready,releasing}') AND id <> $2::bigint";

/*
 * The agent's concurrency limit, checked under a lock on the agent's row so
 * two runs of one agent materializing at once on different workers cannot
 * both pass: the second counts after the first committed.
 */
static void
check_concurrency_limit(MeshWorkspace *ws)
{
	const char *agent[1] = {ws->agent_id};
	const char *args[2] = {ws->agent_id, int64_text(ws->id)};
	char	   *limit;
	int64		live;

	mesh_sql(agent_ensure_sql, 1, agent);
	mesh_sql(agent_lock_sql, 1, agent);
	limit = SPI_processed > 0 ? mesh_sql_value(0, 1) : NULL;
	if (limit == NULL)
		return;
	/* a fresh statement, so a snapshot taken after the lock was granted */
	mesh_sql(agent_live_sql, 2, args);
	live = pg_strtoint64(mesh_sql_value(0, 1));
	if (live >= pg_strtoint64(limit))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("agent \"%s\" already has %lld live workspace(s), its limit is %s",
						ws->agent_id, (long long) live, limit),
				 errhint("Release one of the agent's runs, or raise the limit with mesh.agent_set_budget().")));
}

static void
materialize_body(void *arg)
{
	MaterializeArgs *a = (MaterializeArgs *) arg;
	MeshWorkspace *ws = a->ws;
	const char *run[1] = {ws->run_id};
	const char *backend_arg[1];
	MeshBackend be;
	MeshCapabilities caps;
	char	   *caps_text;
	bool		implicit;

	mesh_sql(lock_sql, 1, run);
	backend_arg[0] = ws->agent_id;
	check_concurrency_limit(ws);
	mesh_sql(select_sql, 1, backend_arg);
	ws->backend_kind = mesh_sql_value(0, 1);
	implicit = strcmp(mesh_sql_value(0, 2), "t") == 0;
	ws->size = mesh_sql_value(0, 3);

	/* re-read the row so the catalog entry of the chosen backend is loaded */
	{
		const char *args[2] = {ws->run_id, ws->backend_kind};
		static const char backend_sql[] =
		"SELECT true, b.enabled, b.driver, b.config::text, c.credential "
		"  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
		" WHERE b.name = $2 AND $1 IS NOT NULL";

		mesh_sql(backend_sql, 2, args);
		ws->backend_found = true;
		ws->backend_enabled = true;
		ws->driver = mesh_sql_value(0, 3);
		ws->config = mesh_sql_value(0, 4);
		ws->credential = mesh_sql_value(0, 5);
	}
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
	caps_text = mesh_capabilities_text(&caps);
	ws->capabilities = MemoryContextStrdup(mesh_txn_result_cxt(), caps_text);
	ws->external_ref = MemoryContextStrdup(mesh_txn_result_cxt(),
										   be.driver->workspace_ref(&be, a->install_id, ws->id));
	json_decref(be.config);
	{
		const char *eargs[2] = {ws->backend_kind, ws->capabilities};

		/* before anything exists on the backend: a refusal leaves the row pending */
		mesh_sql(egress_sql, 2, eargs);
		ws->egress = mesh_sql_value(0, 1);
	}
	{
		const char *args[6] = {int64_text(ws->id), ws->backend_kind, ws->external_ref,
		ws->size, ws->capabilities, ws->egress};

		mesh_sql(mark_acquiring_sql, 6, args);
	}
	{
		char	   *detail = psprintf("{\"size\": \"%s\", \"implicit_selection\": %s, \"egress\": %s}",
									  ws->size, implicit ? "true" : "false", ws->egress);
		const char *args[5] = {"acquiring", ws->run_id, int64_text(ws->id), ws->backend_kind,
		detail};

		mesh_sql(event_sql, 5, args);
	}
	if (implicit)
		ereport(LOG,
				(errmsg("mesh: run \"%s\" of agent \"%s\" uses backend \"%s\", the instance default (the agent has no pin)",
						ws->run_id, ws->agent_id, ws->backend_kind)));
	ws->status = MemoryContextStrdup(mesh_txn_result_cxt(), "acquiring");
}

/* Record the choice of backend and the move to acquiring, durably. */
bool
store_begin_materialize(MeshWorkspace *ws, const char *install_id, ErrorData **err)
{
	MaterializeArgs a = {ws, install_id};

	return mesh_txn("mesh worker: materialize", materialize_body, &a, true, err);
}

typedef struct ReadyArgs
{
	MeshWorkspace *ws;
	const char *caps;
} ReadyArgs;

static const char mark_ready_sql[] =
"UPDATE mesh.workspaces SET status = 'ready', capabilities = $2::jsonb, status_reason = NULL, "
"       materialized_at = pg_catalog.now(), last_used_at = pg_catalog.now() WHERE id = $1::bigint";

static void
ready_body(void *arg)
{
	ReadyArgs  *a = (ReadyArgs *) arg;
	const char *args[2] = {int64_text(a->ws->id), a->caps};
	const char *ev[5] = {"acquired", a->ws->run_id, args[0], a->ws->backend_kind, NULL};

	mesh_sql(mark_ready_sql, 2, args);
	mesh_sql(event_sql, 5, ev);
}

bool
store_materialized(MeshWorkspace *ws, const MeshCapabilities *caps, ErrorData **err)
{
	ReadyArgs	a = {ws, mesh_capabilities_text(caps)};

	if (!mesh_txn("mesh worker: workspace ready", ready_body, &a, true, err))
		return false;
	ws->status = "ready";
	ws->capabilities = (char *) a.caps;
	return true;
}

typedef struct FailArgs
{
	MeshWorkspace *ws;
	bool		retryable;
	const char *reason;
} FailArgs;

/*
 * A retryable failure goes back to pending, keeping the backend and reference
 * it recorded.  The row is acquiring, or ready when a call found its sandbox
 * stopped and tried to wake it.
 */
static const char mark_failed_sql[] =
"UPDATE mesh.workspaces SET status = (CASE WHEN $2 = 't' THEN 'pending' ELSE 'failed' END)::mesh.workspace_status, "
"       status_reason = CASE WHEN $2 = 't' THEN '" MESH_ACQUIRE_INTERRUPTED ": ' || $3 || '; the run''s next call tries again' "
"                            ELSE $3 END "
" WHERE id = $1::bigint AND status OPERATOR(pg_catalog.=) ANY ('{acquiring,ready}')";

static void
fail_body(void *arg)
{
	FailArgs   *a = (FailArgs *) arg;
	const char *args[3] = {int64_text(a->ws->id), a->retryable ? "t" : "f", a->reason};
	char	   *detail = psprintf("{\"retryable\": %s}", a->retryable ? "true" : "false");
	const char *ev[5] = {"acquire_failed", a->ws->run_id, args[0], a->ws->backend_kind, detail};

	mesh_sql(mark_failed_sql, 3, args);
	mesh_sql(event_sql, 5, ev);
}

/*
 * An acquisition failed.  Retryable failures (backend unreachable, a garbled
 * answer) put the row back to pending with its recorded backend and
 * reference: it no longer counts against the agent's concurrency limit, the
 * run's next call retries the same idempotent acquire, and nothing the
 * backend may have created is forgotten (the reaper reconciles it: a
 * sandbox found running makes the row ready again).  Others make the
 * workspace failed, and the reaper releases whatever it may have left.
 */
bool
store_materialize_failed(MeshWorkspace *ws, bool retryable, const char *reason, ErrorData **err)
{
	FailArgs	a = {ws, retryable, reason};

	return mesh_txn("mesh worker: acquire failed", fail_body, &a, true, err);
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
"SELECT deliver_as, name, value FROM d";

/*
 * The other secrets the run may fetch from the broker: not delivered (and
 * so not a read), but their values are redacted from the exec's output all
 * the same, so no secret a run could see ever lands in an exec row.
 */
static const char redact_only_sql[] =
"SELECT NULL, g.name, s.value FROM mesh.grants g "
"  JOIN mesh.workspaces w ON w.run_id = g.run_id "
"  JOIN mesh.secrets s ON s.agent_id = w.agent_id AND s.name = g.name "
" WHERE g.run_id = $1 AND g.kind = 'secret' "
"   AND NOT (g.deliver_as IS NOT NULL AND g.revoked_at IS NULL "
"            AND (g.expires_at IS NULL OR g.expires_at > pg_catalog.now()))";

static const char delivered_event_sql[] =
"INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"SELECT 'secret_read', $1, $2::bigint, $3, "
"       pg_catalog.jsonb_build_object('secret', x, 'delivered_as_env', true, 'exec_id', $4::bigint) "
"  FROM pg_catalog.unnest($5::text[]) x";

/* Append the rows of the last statement to a->delivered (variable may be NULL). */
static void
collect_secrets(ExecStartArgs *a, StringInfo names)
{
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		MeshDelivered *d = MemoryContextAllocZero(mesh_txn_result_cxt(), sizeof(MeshDelivered));
		MemoryContext old;

		d->variable = mesh_sql_value(r, 1);
		d->name = mesh_sql_value(r, 2);
		d->value = mesh_sql_value(r, 3);
		old = MemoryContextSwitchTo(mesh_txn_result_cxt());
		a->delivered = lappend(a->delivered, d);
		MemoryContextSwitchTo(old);
		if (names && d->variable)
			appendStringInfo(names, "%s\"%s\"", names->len > 1 ? "," : "", d->name);
	}
}

static void
fetch_delivered(ExecStartArgs *a)
{
	const char *run[1] = {a->ws->run_id};
	StringInfoData names;

	initStringInfo(&names);
	appendStringInfoChar(&names, '{');
	mesh_sql(delivered_sql, 1, run);
	collect_secrets(a, &names);
	appendStringInfoChar(&names, '}');
	if (names.len > 2)
	{
		const char *ev[5] = {a->ws->run_id, int64_text(a->ws->id), a->ws->backend_kind,
		int64_text(a->exec_id), names.data};

		mesh_sql(delivered_event_sql, 5, ev);
	}
	mesh_sql(redact_only_sql, 1, run);
	collect_secrets(a, NULL);
}

/* The exec row, and the workspace's last use, in one statement. */
static const char exec_insert_sql[] =
"WITH touched AS (UPDATE mesh.workspaces SET last_used_at = pg_catalog.now() WHERE id = $1::bigint) "
"INSERT INTO mesh.execs (workspace_id, run_id, argv, dir, env_names, stdin_bytes, timeout_ms) "
"VALUES ($1::bigint, $2, ARRAY(SELECT pg_catalog.json_array_elements_text($3::json)), $4, "
"        ARRAY(SELECT pg_catalog.json_object_keys($5::json)), $6::int, $7::bigint) RETURNING id";

static const char exec_argv_redacted_sql[] =
"UPDATE mesh.execs SET argv = ARRAY(SELECT pg_catalog.json_array_elements_text($2::json)) "
" WHERE id = $1::bigint";

/*
 * A secret the run may see never stays in its exec row, not even in argv
 * (the command itself gets argv as given).  One more statement, only when
 * a value really is in it.
 */
static void
redact_argv(ExecStartArgs *a)
{
	json_t	   *argv = json_array();
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
		json_array_append_new(argv, json_string(arg));
	}
	if (changed)
	{
		char	   *text = json_dumps(argv, JSON_COMPACT);
		const char *args[2] = {int64_text(a->exec_id), pstrdup(text)};

		free(text);
		mesh_sql(exec_argv_redacted_sql, 2, args);
	}
	json_decref(argv);
}

static void
exec_start_body(void *arg)
{
	ExecStartArgs *a = (ExecStartArgs *) arg;
	json_t	   *argv = json_array();
	char	   *argv_text;
	char	   *env_text = a->spec->env ? json_dumps(a->spec->env, JSON_COMPACT) : NULL;
	const char *args[7];

	for (int i = 0; i < a->spec->argc; i++)
		json_array_append_new(argv, json_string(a->spec->argv[i]));
	argv_text = json_dumps(argv, JSON_COMPACT);
	json_decref(argv);
	args[0] = int64_text(a->ws->id);
	args[1] = a->ws->run_id;
	args[2] = pstrdup(argv_text);
	args[3] = a->spec->dir;
	args[4] = env_text ? pstrdup(env_text) : "{}";
	args[5] = psprintf("%zu", a->spec->stdin_len);
	args[6] = psprintf("%ld", a->spec->timeout_ms);
	free(argv_text);
	free(env_text);
	mesh_sql(exec_insert_sql, 7, args);
	a->exec_id = pg_strtoint64(mesh_sql_value(0, 1));
	if (a->ws->has_grants)
	{
		fetch_delivered(a);
		redact_argv(a);
	}
}

/*
 * The exec row, committed before the command is sent.  The commit does not
 * wait for its WAL flush: the worker flushes to *commit_lsn right after the
 * request is on the wire (mesh_flush_to), so the fsync overlaps the command
 * instead of adding to every exec's latency.
 */
bool
store_exec_started(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id,
				   XLogRecPtr *commit_lsn, List **delivered, ErrorData **err)
{
	ExecStartArgs a = {ws, spec, 0, NIL};

	if (!mesh_txn("mesh worker: exec started", exec_start_body, &a, false, err))
		return false;
	*exec_id = a.exec_id;
	*commit_lsn = XactLastCommitEnd;
	*delivered = a.delivered;
	return true;
}

typedef struct MintArgs
{
	MeshWorkspace *ws;
	const char *hash_hex;
} MintArgs;

static const char mint_sql[] =
"WITH old AS (UPDATE mesh.run_tokens SET revoked_at = pg_catalog.now(), revoked_reason = 'replaced by a new token' "
"              WHERE run_id = $1 AND revoked_at IS NULL) "
"INSERT INTO mesh.run_tokens (run_id, token_sha256, expires_at) "
"SELECT $1, pg_catalog.decode($2, 'hex'), pg_catalog.now() + s.max_run_lifetime FROM mesh.settings s";

static void
mint_body(void *arg)
{
	MintArgs   *a = (MintArgs *) arg;
	const char *args[2] = {a->ws->run_id, a->hash_hex};
	const char *ev[5] = {"token_minted", a->ws->run_id, int64_text(a->ws->id), a->ws->backend_kind, NULL};

	mesh_sql(mint_sql, 2, args);
	mesh_sql(event_sql, 5, ev);
}

/* Record a new run token (its hash) before it is handed to the workspace. */
bool
store_mint_token(MeshWorkspace *ws, const char *hash_hex, ErrorData **err)
{
	MintArgs	a = {ws, hash_hex};

	return mesh_txn("mesh worker: mint run token", mint_body, &a, true, err);
}

/* Make an asynchronously committed row durable. */
void
mesh_flush_to(XLogRecPtr lsn)
{
	uint64		started = mesh_clock_ns();

	if (lsn != InvalidXLogRecPtr)
		XLogFlush(lsn);
	mesh_txn_time_ns += mesh_clock_ns() - started;
}

typedef struct ExecFinishArgs
{
	MeshWorkspace *ws;
	int64		exec_id;
	const MeshExecRecord *rec;
} ExecFinishArgs;

/* The exec's end and the run's charge, in one statement: the result path is hot. */
static const char exec_finish_sql[] =
"WITH e AS ("
"  UPDATE mesh.execs SET status = $2::mesh.exec_status, exit_code = $3::int, stdout = $4, stderr = $5, "
"         truncated = coalesce($6::boolean, false), wall_seconds = $7::float8, cpu_seconds = $8::float8, "
"         charged_seconds = $9::float8, charge_basis = $10, error = $11, memory_peak_bytes = $12::bigint, "
"         finished_at = pg_catalog.clock_timestamp() "
"   WHERE id = $1::bigint RETURNING workspace_id) "
"UPDATE mesh.workspaces w SET compute_seconds = w.compute_seconds + $9::float8, last_used_at = pg_catalog.now() "
"  FROM e WHERE w.id = e.workspace_id";

/* Text a PostgreSQL text column can hold: invalid UTF-8 and NUL become U+FFFD. */
char *
mesh_sanitize_text(const char *data, size_t len)
{
	StringInfoData out;
	size_t		i = 0;

	initStringInfo(&out);
	while (i < len)
	{
		const unsigned char *p = (const unsigned char *) data + i;
		int			n = pg_utf_mblen(p);

		if (*p != 0 && i + n <= len && pg_utf8_islegal(p, n))
		{
			appendBinaryStringInfo(&out, (const char *) p, n);
			i += n;
		}
		else
		{
			appendStringInfoString(&out, "\xEF\xBF\xBD");
			i += 1;
		}
	}
	return out.data;
}

static const char egress_denied_sql[] =
"INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"SELECT 'egress_denied', $1, $2::bigint, $3, "
"       pg_catalog.jsonb_build_object('host', d->>'host', 'port', (d->>'port')::integer, "
"                          'reason', d->>'reason', 'at', d->>'at', 'exec_id', $5::bigint) "
"  FROM pg_catalog.jsonb_array_elements($4::jsonb) d";

/*
 * Each outbound connection the backend refused during the exec becomes one
 * event, in the transaction that records the exec's end, so a denial is
 * never just a connection error inside the sandbox.
 */
static void
record_egress_denials(MeshWorkspace *ws, int64 exec_id, const char *denials)
{
	const char *args[5] = {ws->run_id, int64_text(ws->id), ws->backend_kind, denials,
	int64_text(exec_id)};

	mesh_sql(egress_denied_sql, 5, args);
}

static void
exec_finish_body(void *arg)
{
	ExecFinishArgs *a = (ExecFinishArgs *) arg;
	const MeshExecResult *r = a->rec->result;
	const char *args[12];

	args[0] = int64_text(a->exec_id);
	args[1] = a->rec->status;
	args[2] = r ? psprintf("%d", r->exit_code) : NULL;
	args[3] = r ? r->stdout_data : NULL;
	args[4] = r ? r->stderr_data : NULL;
	args[5] = r ? (r->truncated ? "t" : "f") : NULL;
	args[6] = r ? psprintf("%.6f", r->wall_seconds) : NULL;
	args[7] = r && r->cpu_metered ? psprintf("%.6f", r->cpu_seconds) : NULL;
	args[8] = psprintf("%.6f", a->rec->charged_seconds);
	args[9] = a->rec->charge_basis;
	args[10] = a->rec->error;
	args[11] = r && r->memory_peak_known ? int64_text(r->memory_peak_bytes) : NULL;
	mesh_sql(exec_finish_sql, 12, args);
	if (r && r->egress_denials)
		record_egress_denials(a->ws, a->exec_id, r->egress_denials);
}

/*
 * Record how an exec ended and charge the run.  Committed asynchronously:
 * the worker flushes the WAL up to *commit_lsn before the caller hears of
 * it, once for all the results of a turn of its loop (worker_want_durable).
 * stdout and stderr in rec->result must already be sanitized text.
 */
bool
store_exec_finished(MeshWorkspace *ws, int64 exec_id, const MeshExecRecord *rec,
					XLogRecPtr *commit_lsn, ErrorData **err)
{
	ExecFinishArgs a = {ws, exec_id, rec};

	if (!mesh_txn("mesh worker: exec finished", exec_finish_body, &a, false, err))
		return false;
	*commit_lsn = XactLastCommitEnd;
	return true;
}

/*--------------------------------------------------------------------------
 * The OOM-aware tier climb (mesh.tier_climb_on_oom/_on_release).  Each runs
 * in a transaction of its own, after the exec's end or the release is
 * committed: bookkeeping on the agent's row must never cost the record of
 * what happened (say, when the caller holds a lock on that row).
 *--------------------------------------------------------------------------
 */
typedef struct ClimbArgs
{
	const char *id;
	char	   *notice;
} ClimbArgs;

static const char climb_on_oom_sql[] =
"SELECT mesh.tier_climb_on_oom($1::bigint)";

static const char climb_on_release_sql[] =
"SELECT mesh.tier_climb_on_release($1::bigint)";

static void
climb_on_oom_body(void *arg)
{
	ClimbArgs  *a = (ClimbArgs *) arg;

	mesh_sql(climb_on_oom_sql, 1, &a->id);
	a->notice = mesh_sql_value(0, 1);
}

/*
 * An exec recorded oom raises its agent's tier, once per run; *notice says
 * what happened, for the caller.
 */
bool
store_tier_climb_on_oom(int64 exec_id, char **notice, ErrorData **err)
{
	ClimbArgs	a = {int64_text(exec_id), NULL};

	if (!mesh_txn("mesh worker: tier climb", climb_on_oom_body, &a, true, err))
		return false;
	*notice = a.notice;
	return true;
}

static void
climb_on_release_body(void *arg)
{
	ClimbArgs  *a = (ClimbArgs *) arg;

	mesh_sql(climb_on_release_sql, 1, &a->id);
}

/*
 * A released run may be a clean one that counts towards resetting a climb.
 * Committed asynchronously: a count lost in a crash only delays a reset.
 */
static void
count_clean_run(MeshWorkspace *ws)
{
	ClimbArgs	a = {int64_text(ws->id), NULL};
	ErrorData  *err;

	if (ws->size == NULL)		/* never materialized: it ran nothing */
		return;
	if (mesh_txn("mesh worker: tier climb reset", climb_on_release_body, &a, false, &err))
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
typedef struct FileArgs
{
	MeshWorkspace *ws;
	const char *kind;
	const char *path;
	int64		bytes;
	const char *failure;
} FileArgs;

static void
file_body(void *arg)
{
	FileArgs   *a = (FileArgs *) arg;
	json_t	   *detail = json_pack("{s:s,s:I}", "path", a->path, "bytes", (json_int_t) a->bytes);
	char	   *text;
	const char *ev[5];

	if (a->failure)
		json_object_set_new(detail, "failure", json_string(a->failure));
	text = json_dumps(detail, JSON_COMPACT);
	json_decref(detail);
	ev[0] = a->kind;
	ev[1] = a->ws->run_id;
	ev[2] = int64_text(a->ws->id);
	ev[3] = a->ws->backend_kind;
	ev[4] = pstrdup(text);
	free(text);
	mesh_sql(event_sql, 5, ev);
	mesh_sql(touch_sql, 1, &ev[2]);
}

bool
store_file_event(MeshWorkspace *ws, const char *kind, const char *path, int64 bytes,
				 const char *failure, ErrorData **err)
{
	FileArgs	a = {ws, kind, path, bytes, failure};

	return mesh_txn("mesh worker: file event", file_body, &a, true, err);
}

/*--------------------------------------------------------------------------
 * Release.
 *--------------------------------------------------------------------------
 */
typedef struct ReleaseArgs
{
	MeshWorkspace *ws;
	const char *outcome;
	const char *reason;
} ReleaseArgs;

/* A failed workspace stays failed (terminal, with its reason) while released. */
static const char mark_releasing_sql[] =
"UPDATE mesh.workspaces SET status = CASE WHEN status OPERATOR(pg_catalog.=) 'failed' THEN status ELSE 'releasing' END, "
"       release_reason = coalesce($2, release_reason) "
" WHERE id = $1::bigint";

static const char mark_released_sql[] =
"UPDATE mesh.workspaces SET status = CASE WHEN status OPERATOR(pg_catalog.=) 'failed' THEN status ELSE 'released' END, "
"       release_outcome = $2, release_reason = coalesce($3, release_reason), released_at = pg_catalog.now() "
" WHERE id = $1::bigint";

static const char mark_exhausted_sql[] =
"UPDATE mesh.workspaces SET status = 'failed', status_reason = $2 WHERE id = $1::bigint";

typedef struct ExhaustArgs
{
	MeshWorkspace *ws;
	const char *reason;
	double		used;
} ExhaustArgs;

static void
exhaust_body(void *arg)
{
	ExhaustArgs *a = (ExhaustArgs *) arg;
	const char *args[2] = {int64_text(a->ws->id), a->reason};
	char	   *detail = psprintf("{\"used_seconds\": %.3f, \"max_compute_seconds\": %.3f}",
								  a->used, a->ws->budget_seconds);
	const char *ev[5] = {"budget_exhausted", a->ws->run_id, args[0], a->ws->backend_kind, detail};

	mesh_sql(mark_exhausted_sql, 2, args);
	mesh_sql(event_sql, 5, ev);
}

static const char mark_idle_hibernated_sql[] =
"UPDATE mesh.workspaces SET status = 'pending', status_reason = 'hibernated after sitting idle' "
" WHERE id = $1::bigint";

static const char mark_waking_sql[] =
"UPDATE mesh.workspaces SET status = 'acquiring', status_reason = NULL WHERE id = $1::bigint";

static void
idle_hibernated_body(void *arg)
{
	MeshWorkspace *ws = (MeshWorkspace *) arg;
	const char *args[1] = {int64_text(ws->id)};
	const char *ev[5] = {"hibernated", ws->run_id, args[0], ws->backend_kind, "{\"idle\": true}"};

	mesh_sql(mark_idle_hibernated_sql, 1, args);
	mesh_sql(event_sql, 5, ev);
}

/*
 * An idle workspace was hibernated: the run keeps it (backend and reference
 * stay recorded) and goes back to pending, so its next call wakes it.
 */
bool
store_idle_hibernated(MeshWorkspace *ws, ErrorData **err)
{
	if (!mesh_txn("mesh worker: hibernated", idle_hibernated_body, ws, true, err))
		return false;
	ws->status = "pending";
	return true;
}

static void
waking_body(void *arg)
{
	MeshWorkspace *ws = (MeshWorkspace *) arg;
	const char *run[1] = {ws->run_id};
	const char *args[1] = {int64_text(ws->id)};
	const char *ev[5] = {"waking", ws->run_id, args[0], ws->backend_kind, NULL};

	mesh_sql(lock_sql, 1, run);
	check_concurrency_limit(ws);	/* pending counted for nothing: going live again must fit */
	mesh_sql(mark_waking_sql, 1, args);
	mesh_sql(event_sql, 5, ev);
}

/* A hibernated workspace is about to be woken: acquiring, durably, first. */
bool
store_begin_wake(MeshWorkspace *ws, ErrorData **err)
{
	if (!mesh_txn("mesh worker: waking", waking_body, ws, true, err))
		return false;
	ws->status = "acquiring";
	return true;
}

/*
 * The run spent its compute budget: its workspace becomes failed, a terminal
 * status whose reason says what was allowed and what was used.
 */
bool
store_budget_exhausted(MeshWorkspace *ws, double used, ErrorData **err)
{
	char	   *reason = psprintf("budget exhausted: stopped after %.1f compute-seconds (the run's budget is %.1f)",
								  used, ws->budget_seconds);
	ExhaustArgs a = {ws, reason, used};

	if (!mesh_txn("mesh worker: budget exhausted", exhaust_body, &a, true, err))
		return false;
	ws->status = "failed";
	ws->status_reason = reason;
	return true;
}

static const char mark_stuck_sql[] =
"UPDATE mesh.workspaces SET status_reason = $2, release_outcome = $3 WHERE id = $1::bigint";

static void
releasing_body(void *arg)
{
	ReleaseArgs *a = (ReleaseArgs *) arg;
	const char *run[1] = {a->ws->run_id};
	const char *args[2] = {int64_text(a->ws->id), a->reason};

	mesh_sql(lock_sql, 1, run);
	mesh_sql(mark_releasing_sql, 2, args);
}

/* The move to releasing is committed before the backend is asked. */
bool
store_begin_release(MeshWorkspace *ws, const char *reason, ErrorData **err)
{
	ReleaseArgs a = {ws, NULL, reason};

	if (!mesh_txn("mesh worker: releasing", releasing_body, &a, true, err))
		return false;
	if (strcmp(ws->status, "failed") != 0)
		ws->status = "releasing";
	return true;
}

static const char revoke_run_tokens_sql[] =
"UPDATE mesh.run_tokens SET revoked_at = pg_catalog.now(), revoked_reason = 'the run released its workspace' "
" WHERE run_id = $1 AND revoked_at IS NULL";

static void
released_body(void *arg)
{
	ReleaseArgs *a = (ReleaseArgs *) arg;
	const char *args[3] = {int64_text(a->ws->id), a->outcome, a->reason};
	const char *run[1] = {a->ws->run_id};
	char	   *detail = psprintf("{\"outcome\": \"%s\"}", a->outcome);
	const char *ev[5] = {"released", a->ws->run_id, args[0], a->ws->backend_kind, detail};

	mesh_sql(mark_released_sql, 3, args);
	mesh_sql(revoke_run_tokens_sql, 1, run);
	mesh_sql(event_sql, 5, ev);
}

bool
store_released(MeshWorkspace *ws, const char *outcome, const char *reason, ErrorData **err)
{
	ReleaseArgs a = {ws, outcome, reason};

	if (!mesh_txn("mesh worker: released", released_body, &a, true, err))
		return false;
	count_clean_run(ws);
	if (strcmp(ws->status, "failed") != 0)
		ws->status = "released";
	ws->release_outcome = (char *) outcome;
	return true;
}

static void
stuck_body(void *arg)
{
	ReleaseArgs *a = (ReleaseArgs *) arg;
	bool		by_hand = strcmp(a->outcome, "must be released by hand") == 0;
	const char *args[3] = {int64_text(a->ws->id), a->reason, by_hand ? a->outcome : NULL};
	json_t	   *detail = json_pack("{s:s}", "reason", a->reason);
	char	   *text = json_dumps(detail, JSON_COMPACT);
	const char *ev[5] = {"release_failed", a->ws->run_id, args[0], a->ws->backend_kind, pstrdup(text)};

	free(text);
	json_decref(detail);
	mesh_sql(mark_stuck_sql, 3, args);
	mesh_sql(event_sql, 5, ev);
}

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
	ReleaseArgs a = {ws, ws->backend_found ? "retry" : "must be released by hand",
		ws->backend_found
		? psprintf(answered ? "%s; the reaper retries at its next sweep"
				   : "%s; must be released by hand unless the backend comes back", why)
	: why};

	return mesh_txn("mesh worker: release failed", stuck_body, &a, true, err);
}

/*--------------------------------------------------------------------------
 * Recovery when a worker starts.
 *--------------------------------------------------------------------------
 */
typedef struct RecoverArgs
{
	const char *args[2];
	List	   *interrupted;
} RecoverArgs;

static const char recover_execs_sql[] =
"WITH lost AS ("
"  UPDATE mesh.execs e SET status = 'error', finished_at = pg_catalog.clock_timestamp(), "
"         error = 'interrupted: the server or a mesh worker restarted while the command ran', "
"         charge_basis = 'wall', "
"         charged_seconds = least(extract(epoch FROM pg_catalog.clock_timestamp() - e.started_at), e.timeout_ms / 1000.0) "
"   WHERE e.status OPERATOR(pg_catalog.=) 'running' "
"     AND ((pg_catalog.hashtext(e.run_id)::bigint & 4294967295) % $2::bigint) = $1::bigint "
"  RETURNING e.id, e.workspace_id, e.charged_seconds), "
"charged AS ("
"  UPDATE mesh.workspaces w SET compute_seconds = w.compute_seconds + l.seconds "
"    FROM (SELECT workspace_id, pg_catalog.sum(charged_seconds) AS seconds FROM lost GROUP BY workspace_id) l "
"   WHERE w.id = l.workspace_id) "
"SELECT l.id, w.external_ref, w.backend_kind, b.driver, b.config::text, c.credential "
"  FROM lost l JOIN mesh.workspaces w ON w.id = l.workspace_id "
"  LEFT JOIN mesh.backends b ON b.name = w.backend_kind "
"  LEFT JOIN mesh.backend_credentials c ON c.backend = b.name";

static void
recover_body(void *arg)
{
	RecoverArgs *a = (RecoverArgs *) arg;

	mesh_sql(recover_execs_sql, 2, a->args);
	if (SPI_processed > 0)
		ereport(LOG,
				(errmsg("mesh: marked %llu interrupted exec(s) as failed",
						(unsigned long long) SPI_processed)));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		MeshInterruptedExec *ie = MemoryContextAllocZero(mesh_txn_result_cxt(), sizeof(MeshInterruptedExec));
		MemoryContext old;

		ie->exec_id = pg_strtoint64(mesh_sql_value(r, 1));
		ie->ref = mesh_sql_value(r, 2);
		ie->backend = mesh_sql_value(r, 3);
		ie->driver = mesh_sql_value(r, 4);
		ie->config = mesh_sql_value(r, 5);
		ie->credential = mesh_sql_value(r, 6);
		old = MemoryContextSwitchTo(mesh_txn_result_cxt());
		a->interrupted = lappend(a->interrupted, ie);
		MemoryContextSwitchTo(old);
	}
}

/*
 * Execs this worker owned that were running when it or the server died are
 * failed with a reason and charged for the wall time they may have used (at
 * most their timeout).  *interrupted lists them, so their commands can be
 * killed in case the backend still runs them.
 */
bool
store_recover_after_restart(int worker_index, int nworkers, List **interrupted, ErrorData **err)
{
	RecoverArgs a = {{psprintf("%d", worker_index), psprintf("%d", nworkers)}, NIL};

	if (!mesh_txn("mesh worker: recovery", recover_body, &a, true, err))
		return false;
	*interrupted = a.interrupted;
	return true;
}
