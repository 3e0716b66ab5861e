/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Statistics a monitoring stack scrapes: calls, errors and latency per
 *	  backend and operation, and each worker's load, in shared memory, read
 *	  by mesh.stat_backends and mesh.stat_workers and zeroed by
 *	  mesh.stat_reset(), after PostgreSQL's pg_stat_* views.
 *
 * The caller counts its call where it counts the call's stages (stages.c),
 * by the backend its worker named in the final message: the worker looks
 * the backend's name up here, once per reply, and sends its row's number,
 * never a pointer.  Counting is atomics only; naming a row, the first time
 * a backend answers, takes stat_lock, and a row keeps its name for the
 * life of the server.  A call's latency goes to a log-bucket histogram
 * (four buckets per doubling from 1024 ns, each at most a quarter wider
 * than its floor, which bounds a percentile's error), and the view
 * computes p50/p95/p99 from it, so the call path never sorts or allocates.
 *
 * A reset zeroes the counters and stamps stats_reset; the rows stay (a
 * scraper sees counters fall to zero, not series vanish).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "version.h"

PG_FUNCTION_INFO_V1(mesh_stat_backends);
PG_FUNCTION_INFO_V1(mesh_stat_backend_latency);
PG_FUNCTION_INFO_V1(mesh_stat_workers);
PG_FUNCTION_INFO_V1(mesh_stat_reset);

#define BUCKET_SHIFT 10			/* the histogram's unit: 1024 ns */
/* mesh.stat_backend_latency's buckets: one per doubling, from bucket 8 (8 us) on */
#define EXPORT_FIRST 8
#define EXPORT_BOUNDS ((MESH_STAT_BUCKETS - EXPORT_FIRST) / 4)
StaticAssertDecl(EXPORT_FIRST + 4 * (EXPORT_BOUNDS - 1) < MESH_STAT_BUCKETS,
				 "every exported bound is a bucket's floor");

/* Zero every counter a reset clears (the rows' names and seen marks stay). */
static void
zero_counters(void)
{
	for (int b = 0; b < MESH_STAT_SLOTS; b++)
		for (int op = 0; op < MESH_OP_COUNT; op++)
		{
			MeshOpStats *s = &mesh_shared->stat_backends[b].ops[op];

			pg_atomic_write_u64(&s->calls, 0);
			pg_atomic_write_u64(&s->errors, 0);
			pg_atomic_write_u64(&s->total_ns, 0);
			for (int i = 0; i < MESH_STAT_BUCKETS; i++)
				pg_atomic_write_u64(&s->buckets[i], 0);
		}
	for (int w = 0; w <= MESH_MAX_WORKERS; w++)
	{
		pg_atomic_write_u64(&mesh_shared->stat_workers[w].calls, 0);
		pg_atomic_write_u64(&mesh_shared->stat_workers[w].busy_ns, 0);
		pg_atomic_write_u64(&mesh_shared->stat_workers[w].wal_flushes, 0);
	}
}

/*
 * Called once, when the shared memory is set up (zeroed before): the
 * atomics are initialised, and the counters count from the server's start.
 */
void
mesh_stats_init(void)
{
	SpinLockInit(&mesh_shared->stat_lock);
	for (int b = 0; b < MESH_STAT_SLOTS; b++)
	{
		pg_atomic_init_u32(&mesh_shared->stat_backends[b].named, 0);
		for (int op = 0; op < MESH_OP_COUNT; op++)
		{
			MeshOpStats *s = &mesh_shared->stat_backends[b].ops[op];

			pg_atomic_init_u32(&s->seen, 0);
			pg_atomic_init_u64(&s->calls, 0);
			pg_atomic_init_u64(&s->errors, 0);
			pg_atomic_init_u64(&s->total_ns, 0);
			for (int i = 0; i < MESH_STAT_BUCKETS; i++)
				pg_atomic_init_u64(&s->buckets[i], 0);
		}
	}
	for (int w = 0; w <= MESH_MAX_WORKERS; w++)
	{
		MeshWorkerStats *ws = &mesh_shared->stat_workers[w];

		pg_atomic_init_u64(&ws->calls, 0);
		pg_atomic_init_u64(&ws->busy_ns, 0);
		pg_atomic_init_u64(&ws->wal_flushes, 0);
		pg_atomic_init_u64(&ws->busy_mark, 0);
		pg_atomic_init_u32(&ws->in_flight, 0);
		pg_atomic_init_u64(&ws->last_activity, 0);
	}
	pg_atomic_init_u64(&mesh_shared->stats_reset, (uint64) GetCurrentTimestamp());
}

/* Row B's name, when it has one (read without the lock: set once, before named). */
static const char *
row_name(int b)
{
	if (pg_atomic_read_u32(&mesh_shared->stat_backends[b].named) == 0)
		return NULL;
	pg_read_barrier();
	return mesh_shared->stat_backends[b].name;
}

/*
 * The row of mesh.stat_backends that counts backend NAME (a mesh.backends
 * name; NULL: the call reached no backend), named now if it is the first
 * call of that backend; past MESH_STAT_BACKENDS names, the shared "other"
 * row.  Called by a worker as it replies.
 */
uint32
mesh_stat_backend(const char *name)
{
	uint32		row = MESH_STAT_OTHER;

	if (name == NULL || name[0] == '\0')
		return MESH_STAT_NO_BACKEND;
	for (int b = 1; b <= MESH_STAT_BACKENDS; b++)
	{
		const char *known = row_name(b);

		if (known == NULL)
			break;
		if (strcmp(known, name) == 0)
			return b;
	}
	SpinLockAcquire(&mesh_shared->stat_lock);
	for (int b = 1; b <= MESH_STAT_BACKENDS; b++)
	{
		MeshBackendStats *r = &mesh_shared->stat_backends[b];

		if (pg_atomic_read_u32(&r->named) == 0)
		{
			strlcpy(r->name, name, sizeof(r->name));
			pg_write_barrier();
			pg_atomic_write_u32(&r->named, 1);
			row = b;
			break;
		}
		if (strcmp(r->name, name) == 0)
		{
			row = b;
			break;
		}
	}
	SpinLockRelease(&mesh_shared->stat_lock);
	return row;
}

/*
 * The histogram bucket of a latency: below 4 units, one bucket per unit;
 * then four per doubling, by the two bits after the leading one.
 */
static int
bucket_of(uint64 ns)
{
	uint64		v = ns >> BUCKET_SHIFT;
	int			e;
	int			b;

	if (v < 4)
		return (int) v;
	e = pg_leftmost_one_pos64(v);
	b = 4 * (e - 1) + (int) ((v >> (e - 2)) & 3);
	return Min(b, MESH_STAT_BUCKETS - 1);
}

/* The lowest latency, in nanoseconds, bucket B holds (the inverse of bucket_of). */
static double
bucket_floor_ns(int b)
{
	if (b < 4)
		return (double) ((uint64) b << BUCKET_SHIFT);
	return ldexp((double) (4 + b % 4), b / 4 - 1 + BUCKET_SHIFT);
}

/*
 * Count a call of OP for backend row BACKEND that took ELAPSED_NS, FAILED
 * when it raised an error.  handoff.c counts every call: an answered one
 * with the whole time mesh_stages_count measured, one that got no answer
 * (cancelled, timed out, no worker) as failed.
 */
void
mesh_stat_count(MeshOp op, uint32 backend, bool failed, uint64 elapsed_ns)
{
	MeshOpStats *s;

	if ((int) op <= 0 || (int) op >= MESH_OP_COUNT)
		return;
	if (backend >= MESH_STAT_SLOTS)
		backend = MESH_STAT_OTHER;
	s = &mesh_shared->stat_backends[backend].ops[op];
	if (pg_atomic_read_u32(&s->seen) == 0)
		pg_atomic_write_u32(&s->seen, 1);
	pg_atomic_fetch_add_u64(&s->buckets[bucket_of(elapsed_ns)], 1);
	pg_atomic_fetch_add_u64(&s->total_ns, elapsed_ns);
	if (failed)
		pg_atomic_fetch_add_u64(&s->errors, 1);
	pg_atomic_fetch_add_u64(&s->calls, 1);
}

/*
 * The worker's loop, once per turn: the time since its last count (it was
 * awake) is busy time, IN_FLIGHT calls are in progress, and the turn waited
 * for WAL_FLUSHES flushes (0 or 1: group commit's measure, per call).
 */
void
mesh_stat_worker_turn(int index, int in_flight, uint64 wal_flushes)
{
	MeshWorkerStats *ws = &mesh_shared->stat_workers[index];
	uint64		now = mesh_clock_ns();
	uint64		mark = pg_atomic_read_u64(&ws->busy_mark);

	if (mark != 0 && now > mark)
		pg_atomic_fetch_add_u64(&ws->busy_ns, now - mark);
	pg_atomic_write_u64(&ws->busy_mark, now);
	pg_atomic_write_u32(&ws->in_flight, (uint32) Max(in_flight, 0));
	if (wal_flushes > 0)
		pg_atomic_fetch_add_u64(&ws->wal_flushes, wal_flushes);
}

/* The worker woke from its wait for events (or started): busy from now. */
void
mesh_stat_worker_woke(int index)
{
	pg_atomic_write_u64(&mesh_shared->stat_workers[index].busy_mark, mesh_clock_ns());
}

/* The worker took a call, or ENDED one: its last activity is now. */
void
mesh_stat_worker_activity(int index, bool ended)
{
	MeshWorkerStats *ws = &mesh_shared->stat_workers[index];

	if (ended)
		pg_atomic_fetch_add_u64(&ws->calls, 1);
	pg_atomic_write_u64(&ws->last_activity, (uint64) GetCurrentTimestamp());
}

/* The backend column of row B: its name, "(other)", or NULL (no backend, or a row not in use). */
static const char *
row_label(int b)
{
	return b == MESH_STAT_OTHER ? "(other)" : row_name(b);
}

/* stats_reset, for the views' rows. */
static Datum
stats_reset_datum(void)
{
	return TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&mesh_shared->stats_reset));
}

/*
 * The latency, in milliseconds, below which fraction P of the calls
 * counted in BUCKETS (N of them) fell: the bucket holding that rank, read
 * linearly between its bounds, each of its calls at the middle of its
 * share (a bucket's only call reads as the bucket's middle).
 */
static double
percentile_ms(const uint64 *buckets, uint64 n, double p)
{
	uint64		rank = (uint64) ceil(p * (double) n);
	uint64		below = 0;

	if (rank == 0)
		rank = 1;
	for (int b = 0; b < MESH_STAT_BUCKETS; b++)
	{
		if (buckets[b] == 0)
			continue;
		if (below + buckets[b] >= rank)
		{
			double		lo = bucket_floor_ns(b);
			double		hi = b + 1 < MESH_STAT_BUCKETS ? bucket_floor_ns(b + 1) : lo;

			return (lo + (hi - lo) * ((double) (rank - below) - 0.5) / (double) buckets[b]) / 1e6;
		}
		below += buckets[b];
	}
	return 0;
}

/*
 * mesh.stat_backends(): per backend (NULL: calls that reached none) and
 * operation counted since the server started, its calls, errors, total
 * and mean time and latency percentiles (ms), and when counting started.
 */
Datum
mesh_stat_backends(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		reset = stats_reset_datum();

	InitMaterializedSRF(fcinfo, 0);
	for (int b = 0; b < MESH_STAT_SLOTS; b++)
	{
		const char *name = row_label(b);

		if (b != MESH_STAT_NO_BACKEND && name == NULL)
			continue;
		for (int op = 1; op < MESH_OP_COUNT; op++)
		{
			MeshOpStats *s = &mesh_shared->stat_backends[b].ops[op];
			uint64		buckets[MESH_STAT_BUCKETS];
			uint64		n = 0;
			uint64		calls;
			Datum		values[10];
			bool		nulls[10] = {false};

			if (pg_atomic_read_u32(&s->seen) == 0)
				continue;
			/* the percentiles from one copy of the buckets, whatever is counted meanwhile */
			for (int i = 0; i < MESH_STAT_BUCKETS; i++)
				n += buckets[i] = pg_atomic_read_u64(&s->buckets[i]);
			calls = pg_atomic_read_u64(&s->calls);
			values[0] = name ? CStringGetTextDatum(name) : (Datum) 0;
			nulls[0] = name == NULL;
			values[1] = CStringGetTextDatum(mesh_op_name((MeshOp) op));
			values[2] = Int64GetDatum((int64) calls);
			values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&s->errors));
			values[4] = Float8GetDatum(pg_atomic_read_u64(&s->total_ns) / 1e6);
			values[5] = Float8GetDatum(calls > 0 ? pg_atomic_read_u64(&s->total_ns) / 1e6 / calls : 0);
			values[6] = Float8GetDatum(percentile_ms(buckets, n, 0.50));
			values[7] = Float8GetDatum(percentile_ms(buckets, n, 0.95));
			values[8] = Float8GetDatum(percentile_ms(buckets, n, 0.99));
			nulls[5] = nulls[6] = nulls[7] = nulls[8] = (n == 0 || calls == 0);
			values[9] = reset;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * mesh.stat_backend_latency(): the histogram of mesh.stat_backends' rows as
 * Prometheus reads one, so that a monitoring stack computes percentiles over
 * any window it likes: upper bounds in seconds, one per doubling from 8 us,
 * each with the calls counted below it (cumulative), and the calls' total
 * time and number.  The calls above the last bound are in the count only.
 */
Datum
mesh_stat_backend_latency(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		bounds[EXPORT_BOUNDS];

	for (int i = 0; i < EXPORT_BOUNDS; i++)
		bounds[i] = Float8GetDatum(bucket_floor_ns(EXPORT_FIRST + 4 * i) / 1e9);
	InitMaterializedSRF(fcinfo, 0);
	for (int b = 0; b < MESH_STAT_SLOTS; b++)
	{
		const char *name = row_label(b);

		if (b != MESH_STAT_NO_BACKEND && name == NULL)
			continue;
		for (int op = 1; op < MESH_OP_COUNT; op++)
		{
			MeshOpStats *s = &mesh_shared->stat_backends[b].ops[op];
			Datum		counts[EXPORT_BOUNDS];
			uint64		below = 0;
			int			next = 0;
			Datum		values[6];
			bool		nulls[6] = {false};

			if (pg_atomic_read_u32(&s->seen) == 0)
				continue;
			/* the calls in the buckets below each bound: bound i is bucket EXPORT_FIRST + 4i's floor */
			for (int i = 0; i < MESH_STAT_BUCKETS; i++)
			{
				if (next < EXPORT_BOUNDS && i == EXPORT_FIRST + 4 * next)
					counts[next++] = Int64GetDatum((int64) below);
				below += pg_atomic_read_u64(&s->buckets[i]);
			}
			values[0] = name ? CStringGetTextDatum(name) : (Datum) 0;
			nulls[0] = name == NULL;
			values[1] = CStringGetTextDatum(mesh_op_name((MeshOp) op));
			values[2] = PointerGetDatum(construct_array(bounds, EXPORT_BOUNDS, FLOAT8OID,
														sizeof(float8), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			values[3] = PointerGetDatum(construct_array(counts, EXPORT_BOUNDS, INT8OID,
														sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			values[4] = Float8GetDatum(pg_atomic_read_u64(&s->total_ns) / 1e9);
			/* the buckets' own total, so that the last bucket and the count agree */
			values[5] = Int64GetDatum((int64) below);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

/*
 * mesh.stat_workers(): per worker, its pid (NULL while not running), the
 * calls waiting in its queue and in progress, its busy time (ms), the calls
 * it ended and when it last took or ended one.
 */
Datum
mesh_stat_workers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		reset = stats_reset_datum();

	mesh_require_sql_version();	/* its row has the columns of this version's SQL */
	InitMaterializedSRF(fcinfo, 0);
	for (int w = 0; w < mesh_shared->nworkers; w++)
	{
		MeshWorkerSlot *slot = &mesh_shared->workers[w];
		MeshWorkerStats *ws = &mesh_shared->stat_workers[w];
		pid_t		pid;
		uint32		queued;
		uint64		last = pg_atomic_read_u64(&ws->last_activity);
		Datum		values[9];
		bool		nulls[9] = {false};

		SpinLockAcquire(&slot->mutex);
		pid = slot->pid;
		queued = slot->tail - slot->head;
		SpinLockRelease(&slot->mutex);

		values[0] = Int32GetDatum(w);
		values[1] = Int32GetDatum((int32) pid);
		nulls[1] = pid == 0;
		values[2] = Int32GetDatum(pid != 0 ? (int32) queued : 0);
		values[3] = Int32GetDatum(pid != 0 ? (int32) pg_atomic_read_u32(&ws->in_flight) : 0);
		values[4] = Float8GetDatum(pg_atomic_read_u64(&ws->busy_ns) / 1e6);
		values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&ws->calls));
		values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&ws->wal_flushes));
		values[7] = TimestampTzGetDatum((TimestampTz) last);
		nulls[7] = last == 0;
		values[8] = reset;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * mesh.stat_reset(): zero the counters of mesh.stat_backends and
 * mesh.stat_workers and stamp their stats_reset, as pg_stat_reset() does
 * for PostgreSQL's own (mesh.call_stages keeps its own reset).
 */
Datum
mesh_stat_reset(PG_FUNCTION_ARGS)
{
	zero_counters();
	pg_atomic_write_u64(&mesh_shared->stats_reset, (uint64) GetCurrentTimestamp());
	PG_RETURN_VOID();
}
