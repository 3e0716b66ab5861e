/*-------------------------------------------------------------------------
 *
 * store_snapshot.c
 *	  The rows of project-state snapshots, as the worker changes them: each
 *	  change one short worker transaction around a SQL function of the
 *	  install script (mesh.snapshot_*), which holds the state machine and
 *	  raises the errors a caller sees.  (The reaper's reclaim and
 *	  reconciliation call the same functions, in reaper.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "utils/builtins.h"

#include "store.h"
#include "txn.h"

static char *
int64_text(int64 v)
{
	return psprintf(INT64_FORMAT, v);
}

/* The text of a value read in a transaction, kept past its end. */
static char *
kept(char *value)
{
	return value ? MemoryContextStrdup(mesh_txn_result_cxt(), value) : NULL;
}

/*--------------------------------------------------------------------------
 * Materialization (inside store_begin_materialize's transaction)
 *--------------------------------------------------------------------------
 */
static const char choose_sql[] =
"SELECT c.external_ref, c.notice FROM mesh.snapshot_choose($1::bigint, $2, $3::boolean) c";

/*
 * Which snapshot the workspace stands on, recorded on its row, or why none
 * applies; raises (rolling the materialization back, the row still pending)
 * when the run named a snapshot this backend cannot use.
 */
void
store_snapshot_choose(MeshWorkspace *ws, bool can_snapshot)
{
	const char *args[3] = {int64_text(ws->id), ws->backend_kind, can_snapshot ? "t" : "f"};

	mesh_sql(choose_sql, 3, args);
	ws->snapshot_ref = kept(mesh_sql_value(0, 1));
	ws->snapshot_notice = kept(mesh_sql_value(0, 2));
}

static const char ref_of_sql[] =
"SELECT s.external_ref FROM mesh.workspaces w JOIN mesh.snapshots s ON s.id = w.snapshot_id "
" WHERE w.id = $1::bigint";

static void
ref_of_body(void *arg)
{
	MeshWorkspace *ws = (MeshWorkspace *) arg;
	const char *args[1] = {int64_text(ws->id)};

	if (mesh_sql(ref_of_sql, 1, args) == 1)
		ws->snapshot_ref = kept(mesh_sql_value(0, 1));
}

/*
 * The snapshot a workspace whose acquire was interrupted stands on: the
 * acquire is repeated, and if the backend never made the workspace it must
 * make it on the same snapshot, never empty.
 */
bool
store_snapshot_ref_of(MeshWorkspace *ws, ErrorData **err)
{
	return mesh_txn("mesh worker: snapshot of a workspace", ref_of_body, ws, false, err);
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
"SELECT s.id FROM mesh.snapshot_begin($1, $2::boolean) s";

static const char set_ref_sql[] =
"UPDATE mesh.snapshots SET external_ref = $2 WHERE id = $1::bigint";

static void
begin_body(void *arg)
{
	BeginArgs  *a = (BeginArgs *) arg;
	const char *args[2] = {a->ws->run_id, a->be ? "t" : "f"};
	const char *ref_args[2];

	mesh_sql(begin_sql, 2, args);
	a->id = pg_strtoint64(mesh_sql_value(0, 1));
	a->ref = kept(a->be->driver->snapshot_ref(a->be, a->install_id, a->id));
	ref_args[0] = int64_text(a->id);
	ref_args[1] = a->ref;
	mesh_sql(set_ref_sql, 2, ref_args);
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

	if (!mesh_txn("mesh worker: begin snapshot", begin_body, &a, true, err))
		return false;
	*snapshot_id = a.id;
	*snap_ref = a.ref;
	return true;
}

typedef struct FinishArgs
{
	const char *args[5];
	Datum		row;			/* the mesh.snapshots row, a composite datum */
} FinishArgs;

static const char finish_sql[] =
"SELECT s FROM mesh.snapshot_finish($1::bigint, $2::boolean, $3::bigint, $4::bigint, $5) s";

static void
finish_body(void *arg)
{
	FinishArgs *a = (FinishArgs *) arg;

	mesh_sql(finish_sql, 5, a->args);
	a->row = mesh_sql_datum(0, 1);
}

/*
 * The capture ended: INFO when it is ready, else REASON.  The row comes
 * back as the statement returned it, for the caller to return as it is.
 */
bool
store_snapshot_finish(int64 snapshot_id, const MeshSnapshotInfo *info, const char *reason,
					  Datum *row, ErrorData **err)
{
	FinishArgs	a = {{int64_text(snapshot_id), info ? "t" : "f",
		info ? int64_text(info->size_bytes) : NULL, info ? int64_text(info->file_count) : NULL,
	reason}, (Datum) 0};

	if (!mesh_txn("mesh worker: finish snapshot", finish_body, &a, true, err))
		return false;
	if (row)
		*row = a.row;
	return true;
}
