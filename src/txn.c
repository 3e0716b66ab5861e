/*-------------------------------------------------------------------------
 *
 * txn.c
 *	  Short transactions of a background worker's own, and the statements
 *	  run in them: the one way every mesh background worker (the pool, the
 *	  reaper, the broker) changes or reads rows.
 *
 * A statement takes typed parameters (MeshParam) and its rows are copied
 * (out-of-line values fetched) into the memory context of mesh_txn's
 * caller, where they are read by column name
 * and type (mesh_col_*): a renamed or retyped column is an error, never a
 * value read from the wrong place.  Plans are prepared once per process.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heaptoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "handoff.h"
#include "settings.h"
#include "txn.h"
#include "version.h"

#define MAX_ARGS 16

/* A prepared statement, found by the address of its static text. */
typedef struct MeshPlan
{
	const char *sql;			/* hash key */
	SPIPlanPtr	plan;
	int			nargs;
	Oid			types[MAX_ARGS];
} MeshPlan;

static HTAB *plans = NULL;

/*
 * WAL flushes this process waited for in mesh_flush_to: its own fdatasync, or
 * one under way in another process that its commits needed (mesh.stat_workers).
 */
uint64		mesh_txn_wal_flushes = 0;

/* Nanoseconds this process spent in mesh_txn and WAL flushes (mesh.call_stages()). */
uint64		mesh_txn_time_ns = 0;

/* Where rows of the running transaction are copied to. */
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
 * on mesh's tables and its state-change functions), not as the bootstrap
 * superuser the process connected as: PostgreSQL 15 cannot connect a
 * background worker as a NOLOGIN role.  The switch is security-restricted,
 * as for maintenance commands run as a table's owner, and ends with the
 * transaction.  A missing role fails the transaction: nothing runs as
 * superuser instead.
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
 * else's.  On error the transaction is rolled back and *err says why; the
 * caller decides what the error means.
 */
bool
mesh_txn(const char *what, MeshCommit commit, MeshTxnBody body, void *arg, ErrorData **err)
{
	MemoryContext outer = CurrentMemoryContext;
	volatile bool ok = true;
	uint64		started = mesh_clock_ns();
	XLogRecPtr	flushed_before = GetFlushRecPtr(NULL);

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
		mesh_require_sql_version();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "mesh: SPI_connect failed");
		if (commit == MESH_COMMIT_DEFERRED)
			(void) set_config_option("synchronous_commit", "off", PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
		pgstat_report_activity(STATE_RUNNING, what);
		body(arg);
		SPI_finish();
		PopActiveSnapshot();
		SetUserIdAndSecContext(connected_user, connected_context);
		CommitTransactionCommand();
		/* a durable commit that wrote WAL waited for its flush (its own or one under way) */
		if (commit == MESH_COMMIT_DURABLE && XactLastCommitEnd > flushed_before)
			mesh_txn_wal_flushes++;
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

typedef struct StatementArgs
{
	const char *sql;
	int			nargs;
	const MeshParam *params;
	MeshRows   *rows;
} StatementArgs;

static void
statement_body(void *arg)
{
	StatementArgs *a = (StatementArgs *) arg;

	a->rows = mesh_sql(a->sql, a->nargs, a->params);
}

/*
 * The common case: one statement (typically a call of one of mesh's
 * state-change functions) in a transaction of its own.  *rows, when wanted,
 * holds what it returned.
 */
bool
mesh_txn_sql(const char *what, MeshCommit commit, const char *sql, int nargs,
			 const MeshParam *params, MeshRows **rows, ErrorData **err)
{
	StatementArgs a = {sql, nargs, params, NULL};

	if (!mesh_txn(what, commit, statement_body, &a, err))
		return false;
	if (rows)
		*rows = a.rows;
	return true;
}

/*
 * The plan of sql (a static string: its address is the key), prepared and
 * kept on first use.  A statement is always called with the same types.
 */
static SPIPlanPtr
plan_for(const char *sql, int nargs, const MeshParam *params)
{
	MeshPlan   *entry;
	bool		found;

	if (plans == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(const char *);
		ctl.entrysize = sizeof(MeshPlan);
		plans = hash_create("mesh statements", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	}
	entry = hash_search(plans, &sql, HASH_FIND, NULL);
	if (entry == NULL)
	{
		Oid			types[MAX_ARGS];
		SPIPlanPtr	plan;

		for (int i = 0; i < nargs; i++)
			types[i] = params[i].type;
		plan = SPI_prepare(sql, nargs, types);
		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "mesh: could not prepare statement: %s", SPI_result_code_string(SPI_result));
		entry = hash_search(plans, &sql, HASH_ENTER, &found);
		entry->plan = plan;
		entry->nargs = nargs;
		memcpy(entry->types, types, sizeof(Oid) * nargs);
	}
	if (entry->nargs != nargs)
		elog(ERROR, "mesh: statement called with %d parameters, prepared with %d", nargs, entry->nargs);
	for (int i = 0; i < nargs; i++)
		if (entry->types[i] != params[i].type)
			elog(ERROR, "mesh: parameter $%d has type %u, prepared as %u", i + 1,
				 params[i].type, entry->types[i]);
	return entry->plan;
}

/*
 * Execute one statement inside mesh_txn.  Its rows are copied into the
 * memory of mesh_txn's caller, so they outlive the transaction.
 */
MeshRows *
mesh_sql(const char *sql, int nargs, const MeshParam *params)
{
	SPIPlanPtr	plan;
	Datum		values[MAX_ARGS];
	char		nulls[MAX_ARGS];
	MeshRows   *rows;
	MemoryContext old;
	int			rc;

	if (nargs > MAX_ARGS)
		elog(ERROR, "mesh: a statement takes at most %d parameters", MAX_ARGS);
	plan = plan_for(sql, nargs, params);
	for (int i = 0; i < nargs; i++)
	{
		values[i] = params[i].value;
		nulls[i] = params[i].isnull ? 'n' : ' ';
	}
	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc < 0)
		elog(ERROR, "mesh: statement failed: %s", SPI_result_code_string(rc));

	old = MemoryContextSwitchTo(result_cxt);
	rows = palloc0(sizeof(MeshRows));
	rows->n = SPI_processed;
	if (SPI_tuptable != NULL)
	{
		rows->desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
		rows->rows = palloc(sizeof(HeapTuple) * Max(rows->n, 1));
		for (uint64 r = 0; r < rows->n; r++)
		{
			HeapTuple	t = SPI_tuptable->vals[r];

			/* values stored out of line are fetched now: they are read after the commit */
			rows->rows[r] = HeapTupleHasExternal(t) ? toast_flatten_tuple(t, rows->desc) : heap_copytuple(t);
		}
	}
	MemoryContextSwitchTo(old);
	return rows;
}

/*
 * About to sleep for timeout_ms (-1: until woken): report what the
 * statistics still hold and return the timeout shortened to when they may
 * be reported again.  A report is taken at most once a second, so the one
 * after a process's last transaction is often refused; a process that then
 * slept until its next wake would hold its WAL flushes out of pg_stat_wal
 * for as long, and add them to whatever interval is measured next.
 */
long
mesh_wait_for_stats(long timeout_ms)
{
	long		stats_wait = pgstat_report_stat(false);

	if (stats_wait > 0 && (timeout_ms < 0 || stats_wait < timeout_ms))
		return stats_wait;
	return timeout_ms;
}

/* Where a commit of the last transaction ended in WAL, for mesh_flush_to. */
XLogRecPtr
mesh_txn_commit_lsn(void)
{
	return XactLastCommitEnd;
}

/*
 * Make deferred commits up to lsn durable (nothing for InvalidXLogRecPtr).
 * Returns the nanoseconds it took, which count as transaction time.
 */
uint64
mesh_flush_to(XLogRecPtr lsn)
{
	uint64		started;
	uint64		took;

	if (lsn == InvalidXLogRecPtr)
		return 0;
	started = mesh_clock_ns();
	if (GetFlushRecPtr(NULL) < lsn)
		mesh_txn_wal_flushes++;
	XLogFlush(lsn);
	took = mesh_clock_ns() - started;
	mesh_txn_time_ns += took;
	return took;
}

/*
 * Hand deferred commits up to lsn to the kernel without waiting for the
 * disk (nothing for InvalidXLogRecPtr).  What is written survives the crash
 * of any process, the server's crash restart included (its recovery reads
 * the WAL files, not the WAL buffers a crash loses); it reaches the disk
 * with the next flush, the worker's or the WAL writer's, whichever comes
 * first.  XLogBackgroundFlush is the WAL writer's own step: it writes the
 * completed pages, or, once they are out, through the latest deferred
 * commit; now and then (this process's wal_writer_delay, which the worker
 * sets to its longest, or wal_writer_flush_after) it flushes too.  A few
 * rounds reach lsn; should they not, XLogFlush does.
 * Returns the nanoseconds it took, which count as transaction time.
 */
uint64
mesh_write_to(XLogRecPtr lsn)
{
	uint64		started;
	uint64		took;
	int			rounds = 0;

	if (lsn == InvalidXLogRecPtr)
		return 0;
	started = mesh_clock_ns();
	while (GetXLogWriteRecPtr() < lsn)
	{
		if (++rounds > 3 || !XLogBackgroundFlush())
		{
			mesh_txn_wal_flushes++;
			XLogFlush(lsn);
			break;
		}
	}
	took = mesh_clock_ns() - started;
	mesh_txn_time_ns += took;
	return took;
}

/* Where mesh_sql copies rows: the caller's context at mesh_txn. */
MemoryContext
mesh_txn_result_cxt(void)
{
	return result_cxt;
}

/*--------------------------------------------------------------------------
 * Parameters
 *--------------------------------------------------------------------------
 */

/* text; NULL is SQL NULL. */
MeshParam
mesh_text_param(const char *value)
{
	MeshParam	p = {TEXTOID, (Datum) 0, value == NULL};

	if (value)
		p.value = CStringGetTextDatum(value);
	return p;
}

/* SQL NULL of the given type. */
MeshParam
mesh_null_param(Oid type)
{
	MeshParam	p = {type, (Datum) 0, true};

	return p;
}

/* text[] of n strings (none NULL). */
MeshParam
mesh_text_array_param(const char *const *values, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	MeshParam	p = {TEXTARRAYOID, (Datum) 0, false};

	for (int i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(values[i]);
	p.value = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	return p;
}

/*--------------------------------------------------------------------------
 * Columns, by name and type
 *--------------------------------------------------------------------------
 */

/* The 1-based number of column name in rows, which has row. */
static int
col_number(const MeshRows *rows, uint64 row, const char *name)
{
	int			col;

	if (rows == NULL || rows->desc == NULL || row >= rows->n)
		elog(ERROR, "mesh: no row %llu to read column \"%s\" from", (unsigned long long) row, name);
	col = SPI_fnumber(rows->desc, name);
	if (col <= 0)
		elog(ERROR, "mesh: the statement returned no column \"%s\"", name);
	return col;
}

/*
 * The value of column name in row, which must have type type: a statement
 * and its reader that disagree are a bug to report, not a value to guess.
 */
Datum
mesh_col_datum(const MeshRows *rows, uint64 row, const char *name, Oid type, bool *isnull)
{
	int			col = col_number(rows, row, name);

	if (TupleDescAttr(rows->desc, col - 1)->atttypid != type)
		elog(ERROR, "mesh: column \"%s\" has type %u, read as %u", name,
			 TupleDescAttr(rows->desc, col - 1)->atttypid, type);
	return heap_getattr(rows->rows[row], col, rows->desc, isnull);
}

/* Whether column name (of any type) is NULL in row. */
bool
mesh_col_isnull(const MeshRows *rows, uint64 row, const char *name)
{
	return heap_attisnull(rows->rows[row], col_number(rows, row, name), rows->desc);
}

/* A text column as a C string that lives as long as the rows; NULL stays NULL. */
char *
mesh_col_text(const MeshRows *rows, uint64 row, const char *name)
{
	bool		isnull;
	Datum		d = mesh_col_datum(rows, row, name, TEXTOID, &isnull);
	MemoryContext old;
	char	   *v;

	if (isnull)
		return NULL;
	old = MemoryContextSwitchTo(GetMemoryChunkContext((void *) rows));
	v = TextDatumGetCString(d);
	MemoryContextSwitchTo(old);
	return v;
}

/* A column of type type that must not be NULL (the statement says what it returns). */
static Datum
col_not_null(const MeshRows *rows, uint64 row, const char *name, Oid type)
{
	bool		isnull;
	Datum		d = mesh_col_datum(rows, row, name, type, &isnull);

	if (isnull)
		elog(ERROR, "mesh: column \"%s\" is NULL", name);
	return d;
}

int64
mesh_col_int64(const MeshRows *rows, uint64 row, const char *name)
{
	return DatumGetInt64(col_not_null(rows, row, name, INT8OID));
}

double
mesh_col_float8(const MeshRows *rows, uint64 row, const char *name)
{
	return DatumGetFloat8(col_not_null(rows, row, name, FLOAT8OID));
}

/* A boolean column; NULL reads as false. */
bool
mesh_col_bool(const MeshRows *rows, uint64 row, const char *name)
{
	bool		isnull;
	Datum		d = mesh_col_datum(rows, row, name, BOOLOID, &isnull);

	return !isnull && DatumGetBool(d);
}

/*
 * The row a state-change function returned (columns "row" and "row_type":
 * a mesh.workspaces or mesh.snapshots row) as one composite datum the
 * caller's backend can return as is: detoasted, with a plain header, in the
 * caller's memory (it outlives the transaction's).
 */
Datum
mesh_row_copy(const MeshRows *rows)
{
	bool		isnull;
	Oid			type = DatumGetObjectId(mesh_col_datum(rows, 0, "row_type", OIDOID, &isnull));
	Datum		row = mesh_col_datum(rows, 0, "row", type, &isnull);

	if (isnull)
		elog(ERROR, "mesh: a state-change function returned no row");
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(row));
}
