/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  The mesh.* settings (GUCs, src/settings.c), read by every part of the
 *	  extension.  Includes nothing of the extension's own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_SETTINGS_H
#define MESH_SETTINGS_H

#include "postgres.h"

/* the most worker processes mesh.workers may ask for (shared memory is sized for them) */
#define MESH_MAX_WORKERS 16

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
extern bool mesh_embedded_isolated;
extern char *mesh_isolate_home;
extern int	mesh_isolate_port;
extern int	mesh_isolate_max_isolates;
extern int	mesh_isolate_memory_mb;
extern int	mesh_isolate_cpu_s;

extern void mesh_define_settings(void);

#endif							/* MESH_SETTINGS_H */
