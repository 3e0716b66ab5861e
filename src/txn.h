/*-------------------------------------------------------------------------
 *
 * txn.h
 *	  Short transactions of a background worker's own, and the statements
 *	  run in them: typed parameters in, rows read by column name out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_TXN_H
#define MESH_TXN_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "access/xlogdefs.h"
#include "catalog/pg_type.h"

/* The role every statement of a mesh background worker runs as. */
#define MESH_WORKER_ROLE "mesh_worker"

/* The only schemas a mesh background worker resolves names in. */
#define MESH_WORKER_SEARCH_PATH "pg_catalog, mesh, pg_temp"

/*
 * How a transaction commits.  MESH_COMMIT_DEFERRED does not wait for its WAL
 * flush: for intent whose loss in a crash loses nothing real, or for rows
 * the worker makes durable later: the pool once per turn of its loop for
 * all its calls (worker_want_durable(mesh_txn_commit_lsn()), flushed by
 * mesh_flush_to before any reply is sent), or only written to the kernel
 * (mesh_write_to: an ordinary exec's row, before its request leaves; the
 * result's flush takes it to disk).  A read-only transaction
 * writes no commit record, so MESH_COMMIT_DURABLE costs it nothing.
 */
typedef enum MeshCommit
{
	MESH_COMMIT_DURABLE,
	MESH_COMMIT_DEFERRED
} MeshCommit;

/* One statement parameter, typed. */
typedef struct MeshParam
{
	Oid			type;
	Datum		value;
	bool		isnull;
} MeshParam;

/* The rows a statement returned, copied out of SPI's memory. */
typedef struct MeshRows
{
	TupleDesc	desc;
	uint64		n;
	HeapTuple  *rows;
} MeshRows;

typedef void (*MeshTxnBody) (void *arg);

extern void mesh_worker_connect(const char *appname);
extern bool mesh_txn(const char *what, MeshCommit commit, MeshTxnBody body, void *arg, ErrorData **err);
extern bool mesh_txn_sql(const char *what, MeshCommit commit, const char *sql, int nargs,
						 const MeshParam *params, MeshRows **rows, ErrorData **err);
extern MeshRows *mesh_sql(const char *sql, int nargs, const MeshParam *params);
extern XLogRecPtr mesh_txn_commit_lsn(void);
extern uint64 mesh_flush_to(XLogRecPtr lsn);
extern uint64 mesh_write_to(XLogRecPtr lsn);
extern MemoryContext mesh_txn_result_cxt(void);
extern uint64 mesh_txn_time_ns;
extern uint64 mesh_txn_wal_flushes;
extern long mesh_wait_for_stats(long timeout_ms);

/* A parameter of type type holding value (a Datum of that type). */
static inline MeshParam
mesh_param(Oid type, Datum value)
{
	MeshParam	p = {type, value, false};

	return p;
}

#define mesh_int8_param(v)		mesh_param(INT8OID, Int64GetDatum(v))
#define mesh_int4_param(v)		mesh_param(INT4OID, Int32GetDatum(v))
#define mesh_float8_param(v)	mesh_param(FLOAT8OID, Float8GetDatum(v))
#define mesh_bool_param(v)		mesh_param(BOOLOID, BoolGetDatum(v))
#define mesh_oid_param(v)		mesh_param(OIDOID, ObjectIdGetDatum(v))

extern MeshParam mesh_text_param(const char *value);
extern MeshParam mesh_null_param(Oid type);
extern MeshParam mesh_text_array_param(const char *const *values, int n);

extern Datum mesh_row_copy(const MeshRows *rows);
extern bool mesh_col_isnull(const MeshRows *rows, uint64 row, const char *name);
extern char *mesh_col_text(const MeshRows *rows, uint64 row, const char *name);
extern int64 mesh_col_int64(const MeshRows *rows, uint64 row, const char *name);
extern double mesh_col_float8(const MeshRows *rows, uint64 row, const char *name);
extern bool mesh_col_bool(const MeshRows *rows, uint64 row, const char *name);
extern Datum mesh_col_datum(const MeshRows *rows, uint64 row, const char *name, Oid type,
							bool *isnull);

#endif							/* MESH_TXN_H */
