/*-------------------------------------------------------------------------
 *
 * worker_recover.c
 *	  Commands a mesh worker finds, or leaves, running: the kills it sends
 *	  for itself at its start (its predecessor's execs, failed by recovery)
 *	  and at its exit (its callers' execs), all in flight together under
 *	  one deadline.  Background commands are not killed: a restarted worker
 *	  follows them again (worker_background.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "worker_background.h"
#include "worker_call.h"
#include "worker_recover.h"

static void fail_interrupted_execs(void);

/* A kill the worker sends for itself, at its exit or its start. */
struct ExecKill
{
	MeshDriverRun run;
	int64		exec_id;
};

/* Ask a backend to kill one exec's command; the answer is awaited by await_kills. */
ExecKill *
start_kill(const MeshBackend *be, const char *ref, int64 exec_id)
{
	ExecKill   *kill = palloc0(sizeof(ExecKill));
	MeshHttpRequest req;
	MeshOpState *st = mesh_run_begin(&kill->run, be);
	bool		built = be->driver->kill_request(be, st, ref, psprintf(INT64_FORMAT, exec_id), NULL,
												 &req, &kill->run.err);

	kill->exec_id = exec_id;
	mesh_run_start(&kill->run, built, &req, mesh_parse_kill, NULL, worker_small_response_limit(NULL));
	return kill;
}

/* Wait for the kills' answers, all in flight together, at most until deadline. */
void
await_kills(List *kills, TimestampTz deadline)
{
	ListCell   *lc;

	foreach(lc, kills)
	{
		ExecKill   *kill = lfirst(lc);

		if (mesh_run_until(&kill->run, deadline) == MESH_STEP_FAILED)
			ereport(LOG, (errmsg("mesh worker %d: could not have exec " INT64_FORMAT " killed: %s",
								 worker_index, kill->exec_id, kill->run.err.message)));
		mesh_run_end(&kill->run);
	}
}

/*
 * At start: fail the execs this worker's predecessor left running, and ask
 * their backends to kill the commands in case they still run (all at once,
 * for a second at most); then follow its background commands again.
 */
void
worker_recover(void)
{
	fail_interrupted_execs();
	spawn_followers();
}

/* The foreground execs a predecessor left running: failed, their commands killed. */
static void
fail_interrupted_execs(void)
{
	ErrorData  *err;
	List	   *interrupted = NIL;
	List	   *kills = NIL;
	ListCell   *lc;

	if (!store_recover_after_restart(worker_index, mesh_shared->nworkers, &interrupted, &err))
	{
		ereport(LOG,
				(errmsg("mesh worker %d: recovery skipped: %s", worker_index, err->message)));
		FreeErrorData(err);
		return;
	}
	foreach(lc, interrupted)
	{
		MeshInterruptedExec *ie = lfirst(lc);
		MeshBackend *be = palloc0(sizeof(MeshBackend));

		if (ie->ref && mesh_backend_make(ie->backend, ie->driver, ie->config, ie->credential, be))
			kills = lappend(kills, start_kill(be, ie->ref, ie->exec_id));
	}
	await_kills(kills, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000));
	foreach(lc, kills)
		json_decref(((ExecKill *) lfirst(lc))->run.be->config);
}
