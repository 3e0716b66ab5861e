/*-------------------------------------------------------------------------
 *
 * txn.c
 *	  Short transactions of a background worker's own, and the statements
 *	  run in them: the one way every mesh background worker (the pool, the
 *	  reaper, the broker) changes or reads rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "handoff.h"
#include "mesh_exec.h"
#include "txn.h"

#define MAX_PLANS 64
#define MAX_ARGS 16

typedef struct MeshPlan
{
	const char *sql;			/* identity: the static string's address */
	SPIPlanPtr	plan;
	int			nargs;
} MeshPlan;

static MeshPlan plans[MAX_PLANS];
static int	nplans = 0;

/* Nanoseconds this process spent in mesh_txn and WAL flushes (mesh.call_stages()). */
uint64		mesh_txn_time_ns = 0;

/* Where results of the running transaction are copied to. */
static MemoryContext result_cxt = NULL;

/*
 * Connect a mesh background worker to mesh.database, with a search_path
 * nobody else can steer: a name resolved through a schema a harness member
 * may create in (public, before PostgreSQL 15) would run that member's
 * function with the worker's privileges (docs/security.md).  Only
 * pg_catalog and mesh are searched, pg_temp last; PGC_S_OVERRIDE outranks
 * ALTER ROLE/DATABASE SET and the SET clauses of functions the worker calls.
 */
void
mesh_worker_connect(const char *appname)
{
	BackgroundWorkerInitializeConnection(mesh_database, NULL, 0);
	SetConfigOption("search_path", MESH_WORKER_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname(appname);
}

/*
 * Every statement of a mesh background worker runs as the NOLOGIN role
 * mesh_worker (created by the extension, granted only what the workers do
 * on mesh's tables), not as the bootstrap superuser the process connected
 * as: PostgreSQL 15 cannot connect a background worker as a NOLOGIN role.
 * The switch is security-restricted, as for maintenance commands run as a
 * table's owner, and ends with the transaction.  A missing role fails the
 * transaction: nothing runs as superuser instead.
 */
static void
become_worker_role(void)
{
	Oid			saved_user;
	int			saved_context;

	GetUserIdAndSecContext(&saved_user, &saved_context);
	SetUserIdAndSecContext(get_role_oid(MESH_WORKER_ROLE, false),
						   saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
}

/*
 * Run body in a transaction of its own: a worker never writes in anybody
 * else's.  durable=false commits asynchronously, for intent whose loss in a
 * crash loses nothing real.  On error the transaction is rolled back and
 * *err says why; the caller decides what the error means.
 */
bool
mesh_txn(const char *what, MeshTxnBody body, void *arg, bool durable, ErrorData **err)
{
	MemoryContext outer = CurrentMemoryContext;
	volatile bool ok = true;
	uint64		started = mesh_clock_ns();

	result_cxt = outer;
	PG_TRY();
	{
		Oid			connected_user;
		int			connected_context;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		GetUserIdAndSecContext(&connected_user, &connected_context);
		become_worker_role();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "mesh: SPI_connect failed");
		if (!durable)
			(void) set_config_option("synchronous_commit", "off", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
		pgstat_report_activity(STATE_RUNNING, what);
		body(arg);
		SPI_finish();
		PopActiveSnapshot();
		SetUserIdAndSecContext(connected_user, connected_context);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(outer);
		*err = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(outer);
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
	mesh_txn_time_ns += mesh_clock_ns() - started;
	return ok;
}

/*
 * Execute one statement, all parameters text (cast in SQL).  Plans are
 * prepared once per process, keyed by the statement's address, so callers
 * pass static strings.
 */
uint64
mesh_sql(const char *sql, int nargs, const char *const *args)
{
	SPIPlanPtr	plan = NULL;
	Datum		values[MAX_ARGS];
	char		nulls[MAX_ARGS];
	int			rc;

	Assert(nargs <= MAX_ARGS);
	for (int i = 0; i < nplans; i++)
		if (plans[i].sql == sql)
			plan = plans[i].plan;
	if (plan == NULL)
	{
		Oid			types[MAX_ARGS];

		for (int i = 0; i < nargs; i++)
			types[i] = TEXTOID;
		plan = SPI_prepare(sql, nargs, types);
		if (plan == NULL)
			elog(ERROR, "mesh: could not prepare statement: %s", SPI_result_code_string(SPI_result));
		if (nplans < MAX_PLANS)
		{
			SPI_keepplan(plan);
			plans[nplans].sql = sql;
			plans[nplans].plan = plan;
			plans[nplans].nargs = nargs;
			nplans++;
		}
	}
	for (int i = 0; i < nargs; i++)
	{
		values[i] = args[i] ? CStringGetTextDatum(args[i]) : (Datum) 0;
		nulls[i] = args[i] ? ' ' : 'n';
	}
	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc < 0)
		elog(ERROR, "mesh: statement failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/* Column col (1-based) of result row, copied out of SPI memory; NULL stays NULL. */
char *
mesh_sql_value(uint64 row, int col)
{
	char	   *v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);

	return v ? MemoryContextStrdup(result_cxt, v) : NULL;
}

/*
 * Column col (1-based) of result row as a datum, copied out of SPI memory
 * (a varlena unpacked and detoasted); the column must not be NULL.
 */
Datum
mesh_sql_datum(uint64 row, int col)
{
	bool		isnull;
	int16		typlen;
	bool		typbyval;
	Datum		value = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, &isnull);
	MemoryContext old;

	if (isnull)
		elog(ERROR, "mesh: column %d of a result is NULL", col);
	get_typlenbyval(SPI_gettypeid(SPI_tuptable->tupdesc, col), &typlen, &typbyval);
	old = MemoryContextSwitchTo(result_cxt);
	/* a varlena comes out whole, with a plain header: a tuple may store it packed */
	if (typlen == -1)
		value = PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
	else
		value = datumCopy(value, typbyval, typlen);
	MemoryContextSwitchTo(old);
	return value;
}

/* Where mesh_sql_value copies results: the caller's context at mesh_txn. */
MemoryContext
mesh_txn_result_cxt(void)
{
	return result_cxt;
}
