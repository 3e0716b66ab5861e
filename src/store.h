/*-------------------------------------------------------------------------
 *
 * store.h
 *	  Every row change a worker makes, each in its own short transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_STORE_H
#define MESH_STORE_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "backends/backend.h"
#include "txn.h"

/*
 * mesh.workspace_status, label for label and in the same order (the rows
 * are read as the label's position: no status is ever compared as text).
 */
typedef enum MeshWorkspaceStatus
{
	MESH_WS_PENDING,
	MESH_WS_ACQUIRING,
	MESH_WS_READY,
	MESH_WS_RELEASING,
	MESH_WS_RELEASED,
	MESH_WS_FAILED
} MeshWorkspaceStatus;

/*
 * mesh.status_reason_code, in the same order after MESH_REASON_NONE (no
 * code): why a workspace is in its status.  The sentence people read is
 * rendered from it in SQL (mesh.status_reason_text); code branches on this.
 */
typedef enum MeshReasonCode
{
	MESH_REASON_NONE,
	MESH_REASON_ACQUIRE_INTERRUPTED,
	MESH_REASON_ACQUIRE_FAILED,
	MESH_REASON_HIBERNATED_IDLE,
	MESH_REASON_HIBERNATED_BY_BACKEND,
	MESH_REASON_FOUND_RUNNING,
	MESH_REASON_LOST,
	MESH_REASON_BUDGET_EXHAUSTED,
	MESH_REASON_RELEASE_STUCK
} MeshReasonCode;

extern const char *const mesh_workspace_status_names[];
extern const char *const mesh_reason_code_names[];

/*
 * SQL that reads a workspace_status column as MeshWorkspaceStatus, and a
 * status_reason_code column as MeshReasonCode: the position of the label in
 * a constant array (planned once; enum_range() would read pg_enum at every
 * call), listed as
 * mesh_workspace_status_names and mesh_reason_code_names are (store.c).  test/pgtap/schema.sql and state_changes.sql check the enums'
 * labels in this order.
 */
#define STATUS_INDEX(col) \
	"(pg_catalog.array_position('{pending,acquiring,ready,releasing,released,failed}'::mesh.workspace_status[], " \
	col ") - 1)::bigint"
#define REASON_INDEX(col) \
	"coalesce(pg_catalog.array_position('{acquire_interrupted,acquire_failed,hibernated_idle," \
	"hibernated_by_backend,found_running,lost,budget_exhausted,release_stuck}'::mesh.status_reason_code[], " \
	col "), 0)::bigint"

extern MeshWorkspaceStatus mesh_col_status(const MeshRows *rows, uint64 row, const char *name);

/* A workspace row joined with its backend's catalog entry. */
typedef struct MeshWorkspace
{
	int64		id;
	char	   *run_id;
	char	   *agent_id;
	char	   *actor_id;
	MeshWorkspaceStatus status;
	MeshReasonCode reason_code;
	char	   *status_reason;	/* the sentence reason_code renders to, or a backend's words */
	char	   *backend_kind;
	char	   *external_ref;
	char	   *size;
	char	   *capabilities;	/* JSON text or NULL */
	MeshCapabilities caps;		/* the same, decoded once per row read (absent: false) */
	char	   *egress;			/* network policy captured at creation: JSON text or NULL */
	/* what /workspace stands on (store_snapshot_choose at materialization, then the row) */
	char	   *snapshot_ref;	/* the snapshot's external_ref; NULL: empty */
	char	   *snapshot_notice;	/* which snapshot, or why none, for the set-up NOTICE */
	char	   *release_outcome;
	double		compute_seconds;	/* charged so far */
	double		budget_seconds;	/* max compute-seconds in force; < 0: none */
	bool		has_grants;		/* the run declared live grants */
	bool		token_valid;	/* it holds a run token that is still good */
	/* the catalog entry named by backend_kind, if any */
	bool		backend_found;
	bool		backend_enabled;
	char	   *driver;
	char	   *config;			/* JSON text */
	char	   *credential;		/* never logged */
} MeshWorkspace;

/* mesh.exec_status, label for label and in the same order. */
typedef enum MeshExecStatus
{
	MESH_EXEC_RUNNING,
	MESH_EXEC_OK,
	MESH_EXEC_TIMEOUT,
	MESH_EXEC_CANCELLED,
	MESH_EXEC_OOM,
	MESH_EXEC_BUDGET_EXHAUSTED,
	MESH_EXEC_ERROR,
	MESH_EXEC_KILLED
} MeshExecStatus;

extern const char *const mesh_exec_status_names[];

struct MeshOutputStream;

typedef struct MeshExecRecord
{
	MeshExecStatus status;
	const MeshExecResult *result;	/* NULL when the exec produced none */
	const struct MeshOutputStream *output;	/* stdout, stderr to store whole; NULL: none */
	const char *error;
	double		charged_seconds;
	const char *charge_basis;
	const char *notify;			/* a background command's last NOTIFY payload; NULL: none */
} MeshExecRecord;

extern bool mesh_backend_from_workspace(const MeshWorkspace *ws, MeshBackend *be);

extern bool store_declare(const char *run_id, const char *agent_id, const char *actor_id,
						  const char *parent_run_id, const char *environment,
						  const char *owner_role, const char *project,
						  const int64 *from_snapshot, Datum *row, ErrorData **err);
extern bool store_load(const char *run_id, const char *caller_role, MeshWorkspace *ws, ErrorData **err);

/*
 * What a caller does on a run's row in the transaction that loaded it
 * (store_load_then); returns whether it wrote anything.
 */
typedef bool (*MeshLoadThen) (MeshWorkspace *ws, void *arg);

extern bool store_load_then(const char *run_id, const char *caller_role, MeshWorkspace *ws,
							MeshLoadThen then, void *arg, XLogRecPtr *commit_lsn, ErrorData **err);
extern bool store_begin_materialize(MeshWorkspace *ws, const char *install_id, const char *needs,
									MeshCommit commit,
									ErrorData **err);
extern bool store_materialized(MeshWorkspace *ws, const MeshCapabilities *caps, MeshCommit commit,
							   ErrorData **err);
extern bool store_materialize_failed(MeshWorkspace *ws, bool retryable, const char *reason,
									 ErrorData **err);
extern bool store_exec_started(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id,
							   XLogRecPtr *commit_lsn, List **delivered, ErrorData **err);
extern void store_exec_start_here(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id,
								  List **delivered);
extern bool store_mint_token(MeshWorkspace *ws, const char *hash_hex, ErrorData **err);
extern bool store_exec_finished(int64 exec_id, const MeshExecRecord *rec, XLogRecPtr *commit_lsn,
								const char **output_stopped, ErrorData **err);
extern bool store_tier_climb_on_oom(int64 exec_id, char **notice, ErrorData **err);
extern bool store_file_event(MeshWorkspace *ws, const char *kind, const char *path, int64 bytes,
							 const char *failure, ErrorData **err);
extern bool store_idle_hibernated(MeshWorkspace *ws, ErrorData **err);
extern bool store_begin_wake(MeshWorkspace *ws, MeshCommit commit, ErrorData **err);
extern bool mesh_backend_make(const char *name, const char *driver, const char *config,
							  const char *credential, MeshBackend *be);
extern bool store_budget_exhausted(MeshWorkspace *ws, double used, ErrorData **err);
extern bool store_begin_release(MeshWorkspace *ws, const char *reason, const char *caller, ErrorData **err);
extern bool store_released(MeshWorkspace *ws, const char *outcome, const char *reason,
						   ErrorData **err);
extern bool store_release_stuck(MeshWorkspace *ws, const char *why, bool answered,
								ErrorData **err);
/* An exec that was running when its worker or the server died. */
typedef struct MeshInterruptedExec
{
	int64		exec_id;
	char	   *ref;
	char	   *backend;
	char	   *driver;
	char	   *config;
	char	   *credential;
} MeshInterruptedExec;

extern bool store_recover_after_restart(int worker_index, int nworkers, List **interrupted,
										ErrorData **err);
extern bool store_fail_timed_out_execs(List **lost, ErrorData **err);

/* An exec the reaper failed: its run, for mesh.sweep()'s report. */
typedef struct MeshLostExec
{
	int64		exec_id;
	char	   *run_id;
} MeshLostExec;

/* store_background.c: background commands (mesh_exec_start) */
struct MeshOutputStream;
extern bool store_exec_progress(int64 exec_id, const struct MeshOutputStream *fresh,
								const int64 read[2], XLogRecPtr *commit_lsn, ErrorData **err);
extern bool store_exec_clamped(int64 exec_id, int max_bytes, MeshExecResult *result,
							   ErrorData **err);
extern char *store_exec_channel(int64 exec_id);
extern bool store_background_execs(int worker_index, int nworkers, List **follows,
								   List **run_ids, ErrorData **err);
extern bool store_run_secrets(const char *run_id, List **secrets, ErrorData **err);
extern bool store_exec_signalled(const MeshWorkspace *ws, int64 exec_id, const char *signal,
								 ErrorData **err);
/* mesh_exec_extend's exec as its row has it (store_exec_for_extend) */
typedef struct MeshExtendCheck
{
	char	   *status;			/* NULL: no such exec of the run */
	int64		timeout_ms;
	bool		past_lifetime;	/* the extension would take it past its run's lifetime bound */
	char	   *lifetime_until; /* that bound */
} MeshExtendCheck;

extern bool store_exec_for_extend(const char *run_id, int64 exec_id, int64 by_ms,
								  MeshExtendCheck *check, ErrorData **err);
extern bool store_exec_extended(const MeshWorkspace *ws, int64 exec_id, int64 by_ms,
								const char *role, bool *found, int64 *timeout_ms,
								TimestampTz *deadline, ErrorData **err);

/* store_snapshot.c: project-state snapshots */
extern void store_snapshot_choose(MeshWorkspace *ws, bool can_snapshot);
extern bool store_snapshot_begin(MeshWorkspace *ws, const MeshBackend *be, const char *install_id,
								 int64 *snapshot_id, char **snap_ref, ErrorData **err);
extern bool store_snapshot_finish(int64 snapshot_id, const MeshSnapshotInfo *info,
								  const char *reason, Datum *row, ErrorData **err);

#endif							/* MESH_STORE_H */
