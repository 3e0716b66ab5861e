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
#include "nodes/pg_list.h"

#include "backends/backend.h"

/* How a pending row's status_reason starts when a transient failure interrupted its acquire. */
#define MESH_ACQUIRE_INTERRUPTED "acquire interrupted"

/* A workspace row joined with its backend's catalog entry. */
typedef struct MeshWorkspace
{
	int64		id;
	char	   *run_id;
	char	   *agent_id;
	char	   *actor_id;
	char	   *status;
	char	   *status_reason;
	char	   *backend_kind;
	char	   *external_ref;
	char	   *size;
	char	   *capabilities;	/* JSON text or NULL */
	char	   *egress;			/* network policy captured at creation: JSON text or NULL */
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

typedef struct MeshExecRecord
{
	const char *status;
	const MeshExecResult *result;	/* NULL when the exec produced none */
	const char *error;
	double		charged_seconds;
	const char *charge_basis;
} MeshExecRecord;

extern bool mesh_backend_from_workspace(const MeshWorkspace *ws, MeshBackend *be);
extern char *mesh_sanitize_text(const char *data, size_t len);

extern bool store_declare(const char *run_id, const char *agent_id, const char *actor_id,
						  const char *parent_run_id, const char *environment,
						  const char *owner_role, Datum *row, ErrorData **err);
extern bool store_load(const char *run_id, const char *caller_role, MeshWorkspace *ws, ErrorData **err);
extern bool store_begin_materialize(MeshWorkspace *ws, const char *install_id, ErrorData **err);
extern bool store_materialized(MeshWorkspace *ws, const MeshCapabilities *caps, ErrorData **err);
extern bool store_materialize_failed(MeshWorkspace *ws, bool retryable, const char *reason,
									 ErrorData **err);
extern bool store_exec_started(MeshWorkspace *ws, const MeshExecSpec *spec, int64 *exec_id,
							   XLogRecPtr *commit_lsn, List **delivered, ErrorData **err);
extern bool store_mint_token(MeshWorkspace *ws, const char *hash_hex, ErrorData **err);
extern void mesh_flush_to(XLogRecPtr lsn);
extern bool store_exec_finished(MeshWorkspace *ws, int64 exec_id, const MeshExecRecord *rec,
								XLogRecPtr *commit_lsn, ErrorData **err);
extern bool store_tier_climb_on_oom(int64 exec_id, char **notice, ErrorData **err);
extern bool store_file_event(MeshWorkspace *ws, const char *kind, const char *path, int64 bytes,
							 const char *failure, ErrorData **err);
extern bool store_idle_hibernated(MeshWorkspace *ws, ErrorData **err);
extern bool store_begin_wake(MeshWorkspace *ws, ErrorData **err);
extern bool mesh_backend_make(const char *name, const char *driver, const char *config,
							  const char *credential, MeshBackend *be);
extern bool store_budget_exhausted(MeshWorkspace *ws, double used, ErrorData **err);
extern bool store_begin_release(MeshWorkspace *ws, const char *reason, ErrorData **err);
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

#endif							/* MESH_STORE_H */
