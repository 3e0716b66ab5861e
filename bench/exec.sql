-- bench/exec.sql: the timed loops of bench/run.sh, in schema bench of its throwaway
-- cluster.  Each is timed inside the server (clock_timestamp around the call), so a figure
-- is the whole mesh path (SQL, hand-off, worker, HTTP, sandbox) without the client's round
-- trip; each sample goes to bench.samples, and bench.summary gives median and p99.
-- Each iteration commits, as a harness calling in autocommit mode does: one transaction
-- around the whole loop would hold the xmin horizon back, so that every dead version of
-- the workspace row (two per exec) stayed for the loop's length and each call walked them.
-- bench/run.sh runs these sessions with synchronous_commit off (the samples need no
-- flush; the mesh workers commit as they always do).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE SCHEMA bench;
CREATE TABLE bench.samples (figure text NOT NULL, ms float8 NOT NULL);

-- N warm `mesh_exec(RUN, true)`: the run's sandbox is up (the caller made it so).  With GAP
-- (seconds), each call comes that long after the last one ended: a harness's rhythm (it thinks
-- between commands), where a tight loop hides what an idle host costs.
CREATE PROCEDURE bench.warm_exec(run text, n int, figure text DEFAULT 'warm_exec', gap float8 DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; rc int;
BEGIN
  FOR i IN 1..n LOOP
    IF gap > 0 THEN PERFORM pg_sleep(gap); END IF;
    t0 := clock_timestamp();
    SELECT exit_code INTO STRICT rc FROM mesh_exec(run, ARRAY['true']);
    IF figure IS NOT NULL THEN
      INSERT INTO bench.samples VALUES (figure, extract(epoch FROM clock_timestamp() - t0) * 1000);
    END IF;
    IF rc <> 0 THEN RAISE EXCEPTION 'true exited %', rc; END IF;
    COMMIT;
  END LOOP;
END $$;

-- N `mesh_acquire` of fresh runs that never exec: one hand-off and one row, no backend call.
CREATE PROCEDURE bench.acquire(n int, figure text DEFAULT 'acquire')
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  FOR i IN 1..n LOOP
    t0 := clock_timestamp();
    PERFORM mesh_acquire(format('bench-declare-%s-%s-%s', figure, i, pg_backend_pid()), 'bench', 'bench');
    INSERT INTO bench.samples VALUES (figure, extract(epoch FROM clock_timestamp() - t0) * 1000);
    COMMIT;
  END LOOP;
END $$;

-- N cold starts: a fresh run's acquire until its first `mesh_exec` of `true` returns (the
-- sandbox is created on that exec); each run is released after it is timed.
CREATE PROCEDURE bench.cold_start(n int)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; rc int; run text;
BEGIN
  FOR i IN 1..n LOOP
    run := format('bench-cold-%s-%s', i, pg_backend_pid());
    t0 := clock_timestamp();
    PERFORM mesh_acquire(run, 'bench', 'bench');
    SELECT exit_code INTO STRICT rc FROM mesh_exec(run, ARRAY['true']);
    INSERT INTO bench.samples VALUES ('cold_start', extract(epoch FROM clock_timestamp() - t0) * 1000);
    IF rc <> 0 THEN RAISE EXCEPTION 'true exited %', rc; END IF;
    PERFORM mesh_release(run);
    COMMIT;
  END LOOP;
END $$;

-- Median and 99th percentile of one figure's samples, in ms.
CREATE FUNCTION bench.summary(which text, OUT median_ms float8, OUT p99_ms float8)
LANGUAGE sql AS $$
  SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
  FROM bench.samples WHERE figure = which
$$;
