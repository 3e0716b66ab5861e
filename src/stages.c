/*-------------------------------------------------------------------------
 *
 * stages.c
 *	  Where the time of a call goes: cumulative per-operation, per-stage
 *	  counters in shared memory, and mesh.call_stages() to read them.
 *
 * The worker measures its stages (hand-off, its transactions, HTTP) and
 * sends them in the final message (calls.h); the caller adds the reply's
 * trip and its whole wait, and counts all of them here with atomics, so
 * counting costs no lock.  Every stage row of an operation shares the
 * operation's call count, so total_ms / calls is a per-call mean and the
 * stages of one operation add up to (about) its total.  bench/run.sh prints
 * them as its last table, so the next regression shows where it is.
 * The same count feeds mesh.stat_backends (stats.c), by the backend the
 * worker names in the reply.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "handoff.h"

PG_FUNCTION_INFO_V1(mesh_call_stages);
PG_FUNCTION_INFO_V1(mesh_call_stages_reset);

static const char *const op_names[MESH_OP_COUNT] = {
	[MESH_OP_ACQUIRE] = "acquire",
	[MESH_OP_EXEC] = "exec",
	[MESH_OP_READ_FILE] = "read_file",
	[MESH_OP_WRITE_FILE] = "write_file",
	[MESH_OP_RELEASE] = "release",
	[MESH_OP_SNAPSHOT] = "snapshot",
	[MESH_OP_SWEEP] = "sweep",
	[MESH_OP_EXEC_START] = "exec_start",
	[MESH_OP_EXEC_KILL] = "exec_kill",
	[MESH_OP_EXEC_FOLLOW] = "exec_follow",
	[MESH_OP_EXEC_EXTEND] = "exec_extend",
};

static const char *const stage_names[MESH_STAGE_COUNT] = {
	[MESH_STAGE_HANDOFF] = "handoff",
	[MESH_STAGE_WORKER_TXN] = "worker_txn",
	[MESH_STAGE_HTTP] = "http",
	[MESH_STAGE_REPLY] = "reply",
	[MESH_STAGE_TOTAL] = "total",
};

/* An operation's name, as the views show it ("exec"); NULL for no operation. */
const char *
mesh_op_name(MeshOp op)
{
	if ((int) op <= 0 || (int) op >= MESH_OP_COUNT)
		return NULL;
	return op_names[op];
}

/*
 * A clock both sides of a call read alike: CLOCK_MONOTONIC is one clock for
 * every process of the machine, so a worker's timestamp means the same in
 * its caller.
 */
uint64
mesh_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * UINT64CONST(1000000000) + (uint64) ts.tv_nsec;
}

/* Set every counter with SET: pg_atomic_init_u64 once, pg_atomic_write_u64 on a reset. */
static void
set_counters(void (*set) (volatile pg_atomic_uint64 *ptr, uint64 val))
{
	for (int op = 0; op < MESH_OP_COUNT; op++)
	{
		set(&mesh_shared->stages[op].calls, 0);
		for (int s = 0; s < MESH_STAGE_COUNT; s++)
			set(&mesh_shared->stages[op].ns[s], 0);
	}
}

/* Called once, when the shared memory is set up. */
void
mesh_stages_init(void)
{
	set_counters(pg_atomic_init_u64);
}

/* The interval from a timestamp of the other side, never negative. */
static uint64
since(uint64 then, uint64 now)
{
	return now > then ? now - then : 0;
}

/*
 * The caller has its final message: count the call's stages.  Returns the
 * call's whole time, which the caller also counts for its backend
 * (mesh_stat_count, stats.c).
 */
uint64
mesh_stages_count(MeshOp op, const MeshCallTimes *worker, uint64 started_ns)
{
	MeshStageCounters *c;
	uint64		now = mesh_clock_ns();

	if (op <= 0 || op >= MESH_OP_COUNT)
		return since(started_ns, now);
	c = &mesh_shared->stages[op];
	pg_atomic_fetch_add_u64(&c->ns[MESH_STAGE_HANDOFF], worker->handoff_ns);
	pg_atomic_fetch_add_u64(&c->ns[MESH_STAGE_WORKER_TXN], worker->worker_txn_ns);
	pg_atomic_fetch_add_u64(&c->ns[MESH_STAGE_HTTP], worker->http_ns);
	if (worker->replied_at_ns != 0)
		pg_atomic_fetch_add_u64(&c->ns[MESH_STAGE_REPLY], since(worker->replied_at_ns, now));
	pg_atomic_fetch_add_u64(&c->ns[MESH_STAGE_TOTAL], since(started_ns, now));
	pg_atomic_fetch_add_u64(&c->calls, 1);
	return since(started_ns, now);
}

/*
 * mesh.call_stages(): per operation that answered calls since the server
 * started (or the last reset), each stage's cumulative time.
 */
Datum
mesh_call_stages(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int op = MESH_OP_ACQUIRE; op < MESH_OP_COUNT; op++)
	{
		uint64		calls = pg_atomic_read_u64(&mesh_shared->stages[op].calls);

		if (calls == 0)
			continue;
		for (int s = 0; s < MESH_STAGE_COUNT; s++)
		{
			Datum		values[4];
			bool		nulls[4] = {false};

			values[0] = CStringGetTextDatum(op_names[op]);
			values[1] = CStringGetTextDatum(stage_names[s]);
			values[2] = Int64GetDatum((int64) calls);
			values[3] = Float8GetDatum(pg_atomic_read_u64(&mesh_shared->stages[op].ns[s]) / 1e6);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/* mesh.call_stages_reset(): start counting afresh (a benchmark's own run). */
Datum
mesh_call_stages_reset(PG_FUNCTION_ARGS)
{
	set_counters(pg_atomic_write_u64);
	PG_RETURN_VOID();
}
