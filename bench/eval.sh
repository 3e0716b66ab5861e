#!/usr/bin/env bash
# bench/eval.sh: evaluating a snippet from SQL (mesh_eval on the embedded isolate host) against
# a warm mesh_exec of the same snippet through `node -e` and `python3 -c` in a mesh-sandboxd
# workspace, measured in one run.
#
#   sudo bench/eval.sh [ITERATIONS] [SPACING_MS]        (default: 41 50)
#
# Each figure is the p50 and p99 of ITERATIONS calls timed inside the server (the client's
# round trip excluded), the first call of each kind (the run's routing and health check, or the
# workspace's creation) left out:
#   eval        = mesh_eval(run, 'javascript', 'return 6 * 7'), SPACING_MS apart (the host
#                 starts a fresh process per evaluation ahead of use, as a warm spare: spaced
#                 calls find one ready, as a harness's tool calls do between model turns);
#   eval b2b    = the same back to back (spares restart while the calls come);
#   node -e     = mesh_exec(run, ['node', '-e', 'console.log(6 * 7)']) in a warm workspace;
#   python3 -c  = mesh_exec(run, ['python3', '-c', 'print(6 * 7)']) likewise.
# Ratios: each mesh_exec figure over eval (spaced).  The issue's goal is eval p50 <= 5 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-41}
SPACING=${2:-50}
export MESH_PORT=${MESH_PORT:-5517}
ISOLATE_HOME=${MESH_ISOLATE_HOME:-/usr/local/lib/mesh-isolated}
. bench/lib.sh
[ -x "$ISOLATE_HOME/mesh-isolated" ] || src/isolated/install.sh >/dev/null
bench_cluster 2 "mesh.embedded_isolated = on" "mesh.isolate_port = $((MESH_PORT + 80))" \
  "mesh.isolate_home = '$ISOLATE_HOME'"
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$((MESH_PORT + 80))/v1/health" >/dev/null && break; sleep 0.1
done
psql -X -q -c "SET client_min_messages = warning" -c "SELECT mesh.agent_set('bench-eval', 'isolate')" \
  -c "SELECT mesh.agent_set('bench-shell', 'local')" >/dev/null

# p50 and p99 ms ("P50 P99") of ITERATIONS calls of STATEMENT (run id in :run), SLEEP_MS apart,
# after one call left out
timed() {
  local run=$1 agent=$2 sleep_ms=$3 statement=$4
  psql -X -qAt -F ' ' -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
SELECT 1 FROM mesh_acquire('$run', '$agent', 'bench') \g /dev/null
CREATE TEMP TABLE lat (ms float8);
DO \$\$
DECLARE t0 timestamptz; n int;
BEGIN
  EXECUTE \$s\$$statement\$s\$;
  FOR i IN 1..$ITER LOOP
    PERFORM pg_sleep($sleep_ms / 1000.0);
    t0 := clock_timestamp();
    EXECUTE \$s\$$statement\$s\$;
    INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
  END LOOP;
END \$\$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM lat;
SELECT mesh_release('$run') \g /dev/null
SQL
}

# the answer is checked once, outside the timing: a benchmark of a failing call measures nothing
check() {
  local got
  got=$(psql -X -qAt -c "SET client_min_messages = warning" -c "SELECT 1 FROM mesh_acquire('$1', '$2', 'bench')" -c "$3" | tail -1)
  psql -X -qAt -c "SELECT mesh_release('$1')" >/dev/null
  [ "$got" = 42 ] || { echo "bench/eval.sh: $3 answered '$got', not 42" >&2; exit 1; }
}
check chk-eval bench-eval "SELECT value FROM mesh_eval('chk-eval', 'javascript', 'return 6 * 7')"
check chk-node bench-shell "SELECT trim(stdout, E'\\n') FROM mesh_exec('chk-node', ARRAY['node', '-e', 'console.log(6 * 7)'])"
check chk-py bench-shell "SELECT trim(stdout, E'\\n') FROM mesh_exec('chk-py', ARRAY['python3', '-c', 'print(6 * 7)'])"

read -r eval50 eval99 < <(timed b-eval bench-eval "$SPACING" "SELECT * FROM mesh_eval('b-eval', 'javascript', 'return 6 * 7')")
read -r b2b50 b2b99 < <(timed b-b2b bench-eval 0 "SELECT * FROM mesh_eval('b-b2b', 'javascript', 'return 6 * 7')")
read -r node50 node99 < <(timed b-node bench-shell "$SPACING" "SELECT * FROM mesh_exec('b-node', ARRAY['node', '-e', 'console.log(6 * 7)'])")
read -r py50 py99 < <(timed b-py bench-shell "$SPACING" "SELECT * FROM mesh_exec('b-py', ARRAY['python3', '-c', 'print(6 * 7)'])")

printf '%-44s %8s %8s\n' "(ms, $ITER calls each, timed in the server)" p50 p99
printf '%-44s %8s %8s\n' "mesh_eval javascript, ${SPACING} ms apart" "$eval50" "$eval99"
printf '%-44s %8s %8s\n' "mesh_eval javascript, back to back" "$b2b50" "$b2b99"
printf '%-44s %8s %8s\n' "mesh_exec node -e (warm workspace)" "$node50" "$node99"
printf '%-44s %8s %8s\n' "mesh_exec python3 -c (warm workspace)" "$py50" "$py99"
awk -v e="$eval50" -v n="$node50" -v p="$py50" 'BEGIN {
  printf "ratio  mesh_exec node -e / mesh_eval (p50):     %.2fx\n", n / e
  printf "ratio  mesh_exec python3 -c / mesh_eval (p50): %.2fx\n", p / e
  printf "goal   mesh_eval p50 <= 5 ms:                  %s (%.2f ms)\n", (e <= 5 ? "met" : "not met"), e }'
