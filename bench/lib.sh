#!/usr/bin/env bash
# bench/lib.sh: what every benchmark starts from (source it from the checkout's root).
# bench_cluster WORKERS: build and install, then a throwaway cluster with the embedded
# daemon and WORKERS mesh workers, the extension created; WORK is its directory, and the
# cluster is stopped on exit.
bench_cluster() {
  bash test/lib/deps.sh
  make -s >/dev/null && make -s install >/dev/null
  . test/lib/cluster.sh
  WORK=$(mktemp -d /tmp/mesh-bench.XXXXXX); chmod 755 "$WORK"
  trap 'mesh_cluster_stop "$WORK/pg"' EXIT
  mesh_cluster_start "$WORK/pg" "mesh.embedded_sandboxd = on" "mesh.workers = $1"
  mesh_wait_embedded "$WORK/pg"
  psql -X -q -c "CREATE EXTENSION mesh_exec"
  mesh_wait_workers
}

# bench_median_ms BACKEND KIND ITERATIONS: median ms of mesh_exec(... true) for agent
# bench-BACKEND, timed inside the server without the client round trip; KIND warm (one
# materialized workspace) or cold (each a new run: acquisition + first exec, then release)
bench_median_ms() {
  psql -X -qAt -v backend="$1" -v kind="$2" -v n="$3" <<'SQL'
SET client_min_messages = warning;
SELECT set_config('bench.backend', :'backend', false), set_config('bench.kind', :'kind', false),
       set_config('bench.n', :'n', false) \g /dev/null
CREATE TEMP TABLE lat (ms float8);
DO $$
DECLARE
  b text := current_setting('bench.backend');
  cold boolean := current_setting('bench.kind') = 'cold';
  run text; t0 timestamptz; rc int;
BEGIN
  IF NOT cold THEN
    run := 'bench-warm-' || b;
    PERFORM mesh_acquire(run, 'bench-' || b, 'bench');
    SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
  END IF;
  FOR i IN 1..current_setting('bench.n')::int LOOP
    IF cold THEN
      run := format('bench-cold-%s-%s', b, i);
      PERFORM mesh_acquire(run, 'bench-' || b, 'bench');
    END IF;
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
    INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
    IF cold THEN PERFORM mesh_release(run); END IF;
  END LOOP;
  IF NOT cold THEN PERFORM mesh_release(run); END IF;
END $$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM lat;
SQL
}
