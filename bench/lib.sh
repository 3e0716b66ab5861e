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

# tree_cpu_ms PID: the CPU time (user + system, in ms) PID and all its live descendants have
# used so far, with what the children they already reaped used: the whole server's cost when
# PID is the postmaster (backends, mesh workers, the embedded daemon and its sandboxes).
tree_cpu_ms() {
  local pids
  pids=$(ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q != "" && q != root && q != 0 && q != 1) q = parent[q]; if (q == root) print p } print root }')
  # shellcheck disable=SC2086
  (cd /proc && cat $(printf '%s/stat ' $pids) 2>/dev/null) |
    sed 's/^.*) //' | awk -v hz="$(getconf CLK_TCK)" '{ t += $12 + $13 + $14 + $15 } END { printf "%.0f\n", t * 1000 / hz }'
}
