/*-------------------------------------------------------------------------
 *
 * txn.h
 *	  Short transactions of a background worker's own, and the statements
 *	  run in them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_TXN_H
#define MESH_TXN_H

#include "postgres.h"

/* The role every statement of a mesh background worker runs as. */
#define MESH_WORKER_ROLE "mesh_worker"

/* The only schemas a mesh background worker resolves names in. */
#define MESH_WORKER_SEARCH_PATH "pg_catalog, mesh, pg_temp"

typedef void (*MeshTxnBody) (void *arg);

extern void mesh_worker_connect(const char *appname);
extern bool mesh_txn(const char *what, MeshTxnBody body, void *arg, bool durable, ErrorData **err);
extern uint64 mesh_sql(const char *sql, int nargs, const char *const *args);
extern char *mesh_sql_value(uint64 row, int col);
extern Datum mesh_sql_datum(uint64 row, int col);
extern MemoryContext mesh_txn_result_cxt(void);
extern uint64 mesh_txn_time_ns;

#endif							/* MESH_TXN_H */
