-- bench/coldstart.sql: what the worker's transactions cost a call, timed inside the server.
--   cold start: mesh_acquire of a new run, then its first mesh_exec(... 'true') (the
--     workspace is materialized: backend chosen, sandbox created, row ready, exec row);
--   warm exec: mesh_exec(... 'true') in a ready workspace;
-- with the WAL flushes (pg_stat_wal.wal_sync, every process) per call: each is an fsync
-- some process waited for, in the call's path or beside it; and the CPU the pool's workers
-- spent per call (/proc/PID/schedstat: wall time is noisy on a shared machine, CPU time much
-- less so).  Run with -v iterations=N.
\set ON_ERROR_STOP 1
SELECT set_config('bench.iterations', :'iterations', false) \gset
CREATE TEMP TABLE cold (ms float8);
CREATE TEMP TABLE warm (ms float8);
-- pg_stat_wal is flushed by each process at most once a second: settle, then read
CREATE FUNCTION pg_temp.wal_syncs() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(1.2);
  PERFORM 1 FROM mesh_exec('bench-cold-probe', ARRAY['true']);
  PERFORM pg_sleep(1.2);
  PERFORM pg_stat_clear_snapshot();
  RETURN (SELECT wal_sync FROM pg_stat_wal);
END $$;
-- nanoseconds the pool's workers have run on a CPU
CREATE FUNCTION pg_temp.worker_cpu_ns() RETURNS bigint LANGUAGE sql AS $$
  SELECT sum(split_part(pg_read_file('/proc/' || pid || '/schedstat'), ' ', 1)::bigint)::bigint
    FROM pg_stat_activity WHERE application_name = 'mesh worker'
$$;
SELECT 1 FROM mesh_acquire('bench-cold-probe', 'bench', 'bench');
SELECT pg_temp.wal_syncs() AS s0 \gset
SELECT pg_temp.worker_cpu_ns() AS c0 \gset
DO $$
DECLARE t0 timestamptz; rc int; run text;
BEGIN
  FOR i IN 1..current_setting('bench.iterations')::int LOOP
    run := 'bench-cold-' || i || '-' || pg_backend_pid();
    t0 := clock_timestamp();
    PERFORM mesh_acquire(run, 'bench', 'bench');
    SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
    INSERT INTO cold VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
    PERFORM mesh_release(run);
  END LOOP;
END $$;
SELECT pg_temp.worker_cpu_ns() AS c1 \gset
SELECT pg_temp.wal_syncs() AS s1 \gset
SELECT pg_temp.worker_cpu_ns() AS c2 \gset
DO $$
DECLARE t0 timestamptz; rc int;
BEGIN
  FOR i IN 1..current_setting('bench.iterations')::int LOOP
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec('bench-cold-probe', ARRAY['true']);
    INSERT INTO warm VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
  END LOOP;
END $$;
SELECT pg_temp.worker_cpu_ns() AS c3 \gset
SELECT pg_temp.wal_syncs() AS s2 \gset
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS cold_ms FROM cold \gset
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3) AS warm_ms FROM warm \gset
\echo cold_ms :cold_ms
\echo warm_ms :warm_ms
-- the probe exec and the release in each cold iteration are counted too: subtract a warm
-- exec's share for the probe; the release's flushes stay in the cold figure (said so)
SELECT round(((:s1 - :s0)::numeric - (:s2 - :s1)::numeric / :iterations) / :iterations, 2) AS cold_syncs,
       round((:s2 - :s1)::numeric / :iterations, 2) AS warm_syncs \gset
\echo cold_syncs_with_release :cold_syncs
\echo warm_syncs :warm_syncs
SELECT round((:c1 - :c0)::numeric / :iterations / 1e6, 3) AS cold_cpu, round((:c3 - :c2)::numeric / :iterations / 1e6, 3) AS warm_cpu \gset
\echo cold_worker_cpu_ms_with_release :cold_cpu
\echo warm_worker_cpu_ms :warm_cpu
SELECT mesh_release('bench-cold-probe') \gset
