/*-------------------------------------------------------------------------
 *
 * mesh_exec.c
 *	  Module load: settings (settings.c), shared memory, and the background workers.
 *
 * mesh_exec must be in shared_preload_libraries: the worker pool, which
 * makes every backend call, and the supervisor of the embedded sandbox
 * daemon are registered at postmaster start.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgworker_internals.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include <curl/curl.h>

#include "handoff.h"
#include "settings.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
register_worker(const char *name, const char *function, int index, int flags)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = flags;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "mesh_exec");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s %d", name, index);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", name);
	worker.bgw_main_arg = Int32GetDatum(index);
	RegisterBackgroundWorker(&worker);
}

/* Background workers this library registers: the pool, reaper, broker, supervisor. */
static int
workers_needed(void)
{
	return mesh_worker_count + 1 + (mesh_broker_enabled ? 1 : 0) + (mesh_embedded_sandboxd ? 1 : 0) +
		(mesh_embedded_isolated ? 1 : 0);
}

/*
 * A worker that does not fit in max_worker_processes is only a LOG line at
 * start-up, and then a pool that silently lacks a worker (or the reaper, the
 * broker, the daemon's supervisor): calls wait for a worker that never
 * starts.  Refuse to start instead, saying what to set.  Workers already
 * registered (the logical replication launcher, libraries loaded before this
 * one) count too.
 */
static void
check_worker_slots(void)
{
	int			registered = 0;
	slist_iter	iter;

	slist_foreach(iter, &BackgroundWorkerList)
		registered++;
	if (registered + workers_needed() <= max_worker_processes)
		return;
	ereport(FATAL,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("mesh_exec needs %d background worker processes, but max_worker_processes is %d",
					registered + workers_needed(), max_worker_processes),
			 errdetail("mesh.workers = %d pool workers, %d more for the reaper%s%s%s, and %d registered before mesh_exec.",
					   mesh_worker_count, workers_needed() - mesh_worker_count,
					   mesh_broker_enabled ? " and the broker" : "",
					   mesh_embedded_sandboxd ? " and the sandbox daemon's supervisor" : "",
					   mesh_embedded_isolated ? " and the isolate host's supervisor" : "",
					   registered),
			 errhint("Set max_worker_processes to at least %d (more if parallel queries should get workers too), or lower mesh.workers, and restart the server.",
					 registered + workers_needed())));
}

static void
mesh_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	mesh_shmem_request();
}

static void
mesh_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	mesh_shmem_startup();
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("mesh_exec must be loaded via shared_preload_libraries"),
				 errhint("Add mesh_exec to shared_preload_libraries in postgresql.conf and restart the server.")));

	mesh_define_settings();
	check_worker_slots();
	mesh_reserve_call_space();
	curl_global_init(CURL_GLOBAL_ALL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = mesh_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = mesh_shmem_startup_hook;

	for (int i = 0; i < mesh_worker_count; i++)
		register_worker("mesh worker", "mesh_worker_main", i,
						BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION);
	register_worker("mesh reaper", "mesh_reaper_main", 0,
					BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION);
	if (mesh_broker_enabled)
		register_worker("mesh broker", "mesh_broker_main", 0,
						BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION);
	if (mesh_embedded_sandboxd)
		register_worker("mesh sandboxd supervisor", "mesh_launcher_main", 0, BGWORKER_SHMEM_ACCESS);
	if (mesh_embedded_isolated)
		register_worker("mesh isolated supervisor", "mesh_isolated_launcher_main", 0, BGWORKER_SHMEM_ACCESS);
}
