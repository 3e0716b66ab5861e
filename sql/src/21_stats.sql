------------------------------------------------------------------------------
-- Statistics a monitoring stack scrapes, named and reset after PostgreSQL's
-- pg_stat_* views (times in milliseconds, counters since stats_reset):
-- calls per backend and operation and each worker's load from shared memory
-- (src/stats.c), each agent's use from the tables.  Read by mesh_admin and
-- pg_monitor; reset by mesh_admin (mesh.stat_reset()).
-- deploy/prometheus/mesh_exec_queries.yaml exports them.
------------------------------------------------------------------------------

-- Per backend (NULL: calls that reached none -- declarations, sweeps, calls
-- refused or abandoned before a worker answered) and operation: calls, the
-- calls that raised an error, total and mean time, and latency percentiles
-- read from a log-bucket histogram (at worst a quarter off the exact value).
CREATE FUNCTION mesh.stat_get_backends()
RETURNS TABLE (backend text, operation text, calls bigint, errors bigint,
               total_time double precision, mean_time double precision,
               p50_time double precision, p95_time double precision, p99_time double precision,
               stats_reset timestamptz)
    AS 'MODULE_PATHNAME', 'mesh_stat_backends' LANGUAGE C VOLATILE;

-- The same calls' latency histogram as Prometheus reads one (postgres_exporter's HISTOGRAM):
-- upper bounds in seconds, one per doubling from 8 us, the calls below each (cumulative), their
-- total time in seconds and their number, so that percentiles can be computed over any window.
CREATE FUNCTION mesh.stat_get_backend_latency()
RETURNS TABLE (backend text, operation text, le double precision[], calls_below bigint[],
               sum_seconds double precision, calls bigint)
    AS 'MODULE_PATHNAME', 'mesh_stat_backend_latency' LANGUAGE C VOLATILE;

-- Per worker: its pid (NULL while not running), calls waiting in its queue and
-- in progress, its busy time (awake in its loop), calls it ended, the WAL
-- flushes its turns waited for (group commit: fewer than its calls under
-- concurrency), when it last took or ended one.
CREATE FUNCTION mesh.stat_get_workers()
RETURNS TABLE (worker integer, pid integer, queue_depth integer, calls_in_flight integer,
               busy_time double precision, calls bigint, wal_flushes bigint,
               last_activity timestamptz, stats_reset timestamptz)
    AS 'MODULE_PATHNAME', 'mesh_stat_workers' LANGUAGE C VOLATILE;

-- Zero the counters of mesh.stat_backends and mesh.stat_workers, as pg_stat_reset().
CREATE FUNCTION mesh.stat_reset() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_stat_reset' LANGUAGE C VOLATILE;

CREATE VIEW mesh.stat_backends AS
SELECT backend, operation, calls, errors, total_time, mean_time, p50_time, p95_time, p99_time,
       stats_reset
  FROM mesh.stat_get_backends();

CREATE VIEW mesh.stat_backend_latency AS
SELECT backend, operation, le, calls_below, sum_seconds, calls
  FROM mesh.stat_get_backend_latency();

CREATE VIEW mesh.stat_workers AS
SELECT worker, pid, queue_depth, calls_in_flight, busy_time, calls, wal_flushes, last_activity, stats_reset
  FROM mesh.stat_get_workers();

-- Per agent, from the tables: its runs, those live now, their commands, the CPU
-- seconds those used, the compute charged against budgets, the largest share of
-- its budget a live run has used, and the runs its budget stopped.  One pass over
-- each table (hashed, not a probe per run: about twice as fast at 200,000 commands),
-- so its cost grows with the history kept; the exporter caches it.
CREATE VIEW mesh.stat_agents AS
SELECT w.agent_id,
       count(*) AS runs,
       count(*) FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS live_workspaces,
       coalesce(sum(x.execs), 0)::bigint AS execs,
       coalesce(sum(x.running_execs), 0)::bigint AS running_execs,
       coalesce(sum(x.cpu_seconds), 0) AS cpu_seconds,
       sum(w.compute_seconds) AS compute_seconds,
       max(w.compute_seconds / coalesce(rb.max_compute_seconds, a.max_compute_seconds, s.max_compute_seconds))
           FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS max_budget_used,
       count(*) FILTER (WHERE w.status_reason_code = 'budget_exhausted') AS runs_stopped_by_budget
  FROM mesh.workspaces w
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = w.agent_id
  LEFT JOIN mesh.run_budgets rb ON rb.run_id = w.run_id
  LEFT JOIN (SELECT e.workspace_id, count(*) AS execs,
                    count(*) FILTER (WHERE e.status = 'running') AS running_execs,
                    sum(e.cpu_seconds) AS cpu_seconds
               FROM mesh.execs e GROUP BY e.workspace_id) x ON x.workspace_id = w.id
 GROUP BY w.agent_id;

REVOKE ALL ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers(),
                       mesh.stat_reset() FROM PUBLIC;
REVOKE ALL ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents FROM PUBLIC;
-- (pg_monitor's USAGE on the schema is granted with the others', sql/src/90_privileges.sql)
GRANT EXECUTE ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers()
      TO mesh_admin, pg_monitor;
GRANT SELECT ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents
      TO mesh_admin, pg_monitor;
GRANT EXECUTE ON FUNCTION mesh.stat_reset() TO mesh_admin;
