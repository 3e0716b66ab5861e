/*-------------------------------------------------------------------------
 *
 * mesh_exec.h
 *	  Process-level settings (GUCs) and entry points shared across files.
 *
 * GUCs hold only process-level knobs; backends and credentials live in
 * tables (invariant 7, docs/design.md).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_EXEC_H
#define MESH_EXEC_H

#include "postgres.h"

extern int	mesh_worker_count;
extern char *mesh_database;
extern bool mesh_embedded_sandboxd;
extern int	mesh_embedded_standby;
extern bool mesh_broker_enabled;
extern int	mesh_exec_timeout_ms;
extern int	mesh_max_output_bytes;
extern int	mesh_max_file_bytes;
extern int	mesh_max_stdin_bytes;
extern int	mesh_worker_lock_timeout_ms;
extern int	mesh_worker_max_calls;
extern int	mesh_worker_group_commit_delay_ms;
extern int	mesh_max_background_per_worker;
extern int	mesh_reaper_interval_s;
extern int	mesh_reaper_sweep_timeout_ms;
extern int	mesh_exec_output_limit_bytes;
extern int	mesh_exec_notify_interval_ms;
extern int	mesh_exec_output_retention_min;
extern int	mesh_exec_retention_min;
extern int	mesh_event_retention_min;
extern int	mesh_workspace_retention_min;
extern int	mesh_output_run_quota_mb;
extern int	mesh_output_total_quota_mb;
extern int	mesh_output_disk_reserve_mb;

/* bgworker entry points (src/worker.c, src/launcher.c, src/reaper.c, src/broker.c) */
extern PGDLLEXPORT void mesh_worker_main(Datum arg);
extern PGDLLEXPORT void mesh_launcher_main(Datum arg);
extern PGDLLEXPORT void mesh_reaper_main(Datum arg);
extern PGDLLEXPORT void mesh_broker_main(Datum arg);

#endif							/* MESH_EXEC_H */
