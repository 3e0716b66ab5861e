/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The mesh.* settings (GUCs): their variables and their definitions.
 *
 * GUCs hold only process-level knobs; backends and credentials live in
 * tables (invariant 7, docs/design.md).  Every file reads the settings
 * through settings.h, which includes nothing of the extension's, so that
 * reading a setting never makes a file depend on module load (mesh_exec.c)
 * or the hand-off (handoff.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "settings.h"

int			mesh_worker_count = 2;
char	   *mesh_database = NULL;
bool		mesh_embedded_sandboxd = true;
int			mesh_embedded_standby = 1;
bool		mesh_broker_enabled = true;
int			mesh_exec_timeout_ms = 300000;
int			mesh_max_output_bytes = 65536;
int			mesh_max_file_bytes = 16 * 1024 * 1024;
int			mesh_max_stdin_bytes = 16 * 1024 * 1024;
int			mesh_worker_lock_timeout_ms = 2000;
int			mesh_worker_max_calls = 128;
int			mesh_worker_group_commit_delay_ms = 2;
int			mesh_max_background_per_worker = 256;
int			mesh_reaper_interval_s = 600;
int			mesh_reaper_sweep_timeout_ms = 60000;
int			mesh_exec_output_limit_bytes = 64 * 1024 * 1024;
int			mesh_exec_notify_interval_ms = 50;
int			mesh_exec_output_retention_min = 7 * 24 * 60;
int			mesh_exec_retention_min = 14 * 24 * 60;
int			mesh_event_retention_min = 14 * 24 * 60;
int			mesh_workspace_retention_min = 14 * 24 * 60;
int			mesh_output_run_quota_mb = 1024;
int			mesh_output_total_quota_mb = -1;
int			mesh_output_disk_reserve_mb = -1;
bool		mesh_embedded_isolated = false;
char	   *mesh_isolate_home = NULL;
int			mesh_isolate_port = 5690;
int			mesh_isolate_max_isolates = 8;
int			mesh_isolate_memory_mb = 1024;
int			mesh_isolate_cpu_s = 10;

/*
 * Define every mesh.* setting, at module load (_PG_init), before anything
 * reads one.
 */
void
mesh_define_settings(void)
{
	DefineCustomIntVariable("mesh.workers",
							"Number of mesh worker processes that make backend calls.",
							NULL, &mesh_worker_count, 2, 1, MESH_MAX_WORKERS,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("mesh.database",
							   "Database in which the mesh_exec extension is installed.",
							   NULL, &mesh_database, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("mesh.embedded_sandboxd",
							 "Start and supervise a mesh-sandboxd on a unix socket in the data directory.",
							 NULL, &mesh_embedded_sandboxd, true,
							 PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.embedded_standby",
							"Sandboxes the embedded mesh-sandboxd keeps started for new workspaces (its --standby).",
							"Each costs a holder's memory (under a megabyte) and saves a cold start the sandbox's start; 0 keeps none.",
							&mesh_embedded_standby, 1, 0, 64,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("mesh.broker",
							 "Serve the credential broker on a unix socket in the data directory.",
							 NULL, &mesh_broker_enabled, true,
							 PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.exec_timeout",
							"Default timeout of a command when mesh_exec is given none.",
							NULL, &mesh_exec_timeout_ms, 300000, 100, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.max_output",
							"Bytes of stdout and of stderr kept per command (head and tail).",
							NULL, &mesh_max_output_bytes, 65536, 1024, 16 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.max_file_size",
							"Largest file mesh_read_file and mesh_write_file move; a write is checked before the hand-off.",
							NULL, &mesh_max_file_bytes, 16 * 1024 * 1024, 1024, 512 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.max_stdin_size",
							"Largest stdin mesh_exec passes to a command; checked before the hand-off.",
							NULL, &mesh_max_stdin_bytes, 16 * 1024 * 1024, 1024, 512 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.worker_lock_timeout",
							"How long a worker waits for a row lock before failing the request.",
							NULL, &mesh_worker_lock_timeout_ms, 2000, 10, 600000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	/* how long an exec's result may wait for others' commits to share its WAL flush */
	DefineCustomIntVariable("mesh.worker_group_commit_delay",
							"Longest a worker holds an exec's reply for other calls' results to share its WAL flush.",
							"Only while other calls are in progress; 0 flushes at once.",
							&mesh_worker_group_commit_delay_ms, 2, 0, 100,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	/* each call in progress holds a socket; curl's fd_set reaches descriptor 1023 only */
	DefineCustomIntVariable("mesh.worker_max_calls",
							"Calls one mesh worker runs at once; more wait in its queue.",
							NULL, &mesh_worker_max_calls, 128, 1, 512,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	/* each followed background command holds a socket of its worker's and a share of its memory */
	DefineCustomIntVariable("mesh.max_background_per_worker",
							"Background commands one mesh worker follows at once; a start past it is refused.",
							"A worker near its open-files limit refuses new background commands sooner.",
							&mesh_max_background_per_worker, 256, 1, 4096,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.reaper_interval",
							"Time between two sweeps of the reaper.",
							NULL, &mesh_reaper_interval_s, 600, 1, 7 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.reaper_sweep_timeout",
							"Longest time one sweep of the reaper may take.",
							NULL, &mesh_reaper_sweep_timeout_ms, 60000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.exec_output_limit",
							"Bytes of stdout and of stderr stored whole per command (beyond it the tail is kept).",
							NULL, &mesh_exec_output_limit_bytes, 64 * 1024 * 1024, 1024, 256 * 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.exec_notify_interval",
							"Shortest time between two steps of a background command's output (each stored with a NOTIFY).",
							NULL, &mesh_exec_notify_interval_ms, 50, 0, 60000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.exec_output_retention",
							"How long a command's stored output is kept after it ends; 0 keeps it.",
							NULL, &mesh_exec_output_retention_min, 7 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MIN, NULL, NULL, NULL);
	/* history: read by mesh.history_expire(), which the reaper calls each sweep (20_retention.sql) */
	DefineCustomIntVariable("mesh.exec_retention",
							"How long a finished command's row (and its stored output) is kept; 0 keeps it.",
							"Only commands of released or failed runs go; their totals are kept in mesh.usage_daily.",
							&mesh_exec_retention_min, 14 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MIN, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.event_retention",
							"How long a row of mesh.events is kept; 0 keeps it.",
							"Events of live workspaces stay whatever their age.",
							&mesh_event_retention_min, 14 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MIN, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.workspace_retention",
							"How long a released or failed workspace's row is kept after its release; 0 keeps it.",
							"A row goes only once its commands have gone and no sandbox or live child run needs it; "
							"its totals are kept in mesh.usage_daily.",
							&mesh_workspace_retention_min, 14 * 24 * 60, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MIN, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.output_run_quota",
							"Bytes of output one run's commands may store in all (beyond it storing stops, the commands run on).",
							NULL, &mesh_output_run_quota_mb, 1024, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.output_total_quota",
							"Disk space all stored output may take; -1: a tenth of the data directory's filesystem.",
							NULL, &mesh_output_total_quota_mb, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.output_disk_reserve",
							"Free space on the data directory's (and pg_wal's) filesystem below which no output is stored; "
							"-1: a tenth of the filesystem, or twice max_wal_size if that is more.",
							NULL, &mesh_output_disk_reserve_mb, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomBoolVariable("mesh.embedded_isolated",
							 "Start and supervise mesh-isolated, the isolate host, on loopback (the \"isolate\" backend).",
							 "Off by default: the runtime is an optional install (src/isolated/install.sh).",
							 &mesh_embedded_isolated, false,
							 PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("mesh.isolate_home",
							   "Directory of the installed mesh-isolated (src/isolated/install.sh's prefix).",
							   NULL, &mesh_isolate_home, "/usr/local/lib/mesh-isolated",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.isolate_port",
							"Loopback TCP port of the embedded mesh-isolated.",
							NULL, &mesh_isolate_port, 5690, 1, 65535,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.isolate_max_isolates",
							"Evaluations the embedded mesh-isolated runs at once; more are refused (too_many_isolates).",
							NULL, &mesh_isolate_max_isolates, 8, 1, 256,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.isolate_memory",
							"Memory (data mappings) of one evaluation's process on the embedded mesh-isolated.",
							"At least 1 GB: the runtime reserves several hundred MB to start; half is V8's heap.",
							&mesh_isolate_memory_mb, 1024, 1024, 65536,
							PGC_POSTMASTER, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("mesh.isolate_cpu_time",
							"CPU time of one evaluation's process on the embedded mesh-isolated (RLIMIT_CPU).",
							NULL, &mesh_isolate_cpu_s, 10, 1, 86400,
							PGC_POSTMASTER, GUC_UNIT_S, NULL, NULL, NULL);
	MarkGUCPrefixReserved("mesh");
}
