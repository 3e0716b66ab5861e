-- bench/exec.sql: median latency of SELECT mesh_exec(... 'true') in a warm workspace,
-- timed inside the server so the figure is the whole mesh path (SQL, hand-off,
-- worker, HTTP, sandbox) without the client round trip.
\set ON_ERROR_STOP 1
SELECT 1 FROM mesh_acquire('bench-warm', 'bench', 'bench');
SELECT exit_code FROM mesh_exec('bench-warm', ARRAY['true']) \gset
CREATE TEMP TABLE lat (ms float8);
SELECT set_config('bench.iterations', :'iterations', false) \gset
DO $$
DECLARE t0 timestamptz; rc int;
BEGIN
  FOR i IN 1..current_setting('bench.iterations')::int LOOP
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec('bench-warm', ARRAY['true']);
    INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
  END LOOP;
END $$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 4) AS median_ms FROM lat \gset
\echo median_ms :median_ms
SELECT mesh_release('bench-warm') \gset
-- a run that never executes: declaring it costs one hand-off and one row, no backend call
CREATE TEMP TABLE decl (ms float8);
DO $$
DECLARE t0 timestamptz;
BEGIN
  FOR i IN 1..current_setting('bench.iterations')::int LOOP
    t0 := clock_timestamp();
    PERFORM mesh_acquire('bench-chat-' || i || '-' || pg_backend_pid(), 'bench', 'bench');
    INSERT INTO decl VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
  END LOOP;
END $$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 4) AS declare_ms FROM decl \gset
\echo declare_ms :declare_ms
