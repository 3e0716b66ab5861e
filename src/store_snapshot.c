/*-------------------------------------------------------------------------
 *
 * store_snapshot.c
 *	  The rows of project-state snapshots, as the worker changes them: each
 *	  change a call of a state-change function of the install script
 *	  (mesh.snapshot_*), which holds the state machine and raises the errors
 *	  a caller sees, with typed parameters through txn.c.  (The reaper's
 *	  reclaim and reconciliation call the same functions, in reaper.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "store.h"
#include "txn.h"

/*--------------------------------------------------------------------------
 * Materialization (inside store_begin_materialize's transaction)
 *--------------------------------------------------------------------------
 */
static const char choose_sql[] =
"SELECT c.external_ref, c.notice FROM mesh.snapshot_choose($1, $2, $3) c";

/*
 * Which snapshot the workspace stands on, recorded on its row, or why none
 * applies; raises (rolling the materialization back, the row still pending)
 * when the run named a snapshot this backend cannot use.
 */
void
store_snapshot_choose(MeshWorkspace *ws, bool can_snapshot)
{
	MeshParam	p[3] = {mesh_int8_param(ws->id), mesh_text_param(ws->backend_kind),
	mesh_bool_param(can_snapshot)};
	MeshRows   *chosen = mesh_sql(choose_sql, 3, p);

	ws->snapshot_ref = mesh_col_text(chosen, 0, "external_ref");
	ws->snapshot_notice = mesh_col_text(chosen, 0, "notice");
}

/*--------------------------------------------------------------------------
 * mesh_snapshot: the row before the backend call, then its end
 *--------------------------------------------------------------------------
 */
typedef struct BeginArgs
{
	MeshWorkspace *ws;
	const MeshBackend *be;
	const char *install_id;
	int64		id;
	char	   *ref;
} BeginArgs;

static const char begin_sql[] =
"SELECT s.id FROM mesh.snapshot_begin($1, $2) s";

static const char named_sql[] =
"SELECT mesh.snapshot_named($1, $2)";

/* The capturing row (refused without BE), then the name its driver chose for it. */
static void
begin_body(void *arg)
{
	BeginArgs  *a = (BeginArgs *) arg;
	MeshParam	begin[2] = {mesh_text_param(a->ws->run_id), mesh_bool_param(a->be != NULL)};
	MeshRows   *row = mesh_sql(begin_sql, 2, begin);
	MeshParam	named[2];

	a->id = mesh_col_int64(row, 0, "id");
	a->ref = MemoryContextStrdup(mesh_txn_result_cxt(),
								 a->be->driver->snapshot_ref(a->be, a->install_id, a->id));
	named[0] = mesh_int8_param(a->id);
	named[1] = mesh_text_param(a->ref);
	(void) mesh_sql(named_sql, 2, named);
}

/*
 * The capturing row, with the name the driver chose, committed durably
 * before the backend is called: reconciliation relies on it to tell a
 * capture of ours from a stray.  Refusals (no project, not materialized,
 * no capability: BE is NULL) are raised by mesh.snapshot_begin.
 */
bool
store_snapshot_begin(MeshWorkspace *ws, const MeshBackend *be, const char *install_id,
					 int64 *snapshot_id, char **snap_ref, ErrorData **err)
{
	BeginArgs	a = {ws, be, install_id, 0, NULL};

	if (!mesh_txn("mesh worker: begin snapshot", MESH_COMMIT_DURABLE, begin_body, &a, err))
		return false;
	*snapshot_id = a.id;
	*snap_ref = a.ref;
	return true;
}

static const char finish_sql[] =
"SELECT s AS row, 'mesh.snapshots'::pg_catalog.regtype::pg_catalog.oid AS row_type "
"  FROM mesh.snapshot_finish($1, $2, $3, $4, $5) s";

/*
 * The capture ended: INFO when it is ready, else REASON.  *row is the
 * mesh.snapshots row as one composite datum, for the caller to return as
 * it is.
 */
bool
store_snapshot_finish(int64 snapshot_id, const MeshSnapshotInfo *info, const char *reason,
					  Datum *row, ErrorData **err)
{
	MeshParam	p[5] = {mesh_int8_param(snapshot_id), mesh_bool_param(info != NULL),
		info ? mesh_int8_param(info->size_bytes) : mesh_null_param(INT8OID),
		info ? mesh_int8_param(info->file_count) : mesh_null_param(INT8OID),
	mesh_text_param(reason)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: finish snapshot", MESH_COMMIT_DURABLE, finish_sql, 5, p,
					  &rows, err))
		return false;
	if (row)
		*row = mesh_row_copy(rows);
	return true;
}
