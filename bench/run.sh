#!/usr/bin/env bash
# bench/run.sh: mesh_exec against its baselines, measured in one run, printed as ratios.
#
#   sudo bench/run.sh [ITERATIONS] [CLIENTS]
#
# 1. latency: SELECT mesh_exec(... true) in a warm workspace vs a bare fork+exec
#    of /bin/true (target: at most 2x); and declaring a run that never execs.
# 2. throughput: CLIENTS concurrent runs exec-ing `true` (pgbench) vs CLIENTS
#    processes doing bare fork+exec (target: at least half the raw rate).
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-300}
CLIENTS=${2:-4}
. bench/lib.sh
bench_cluster 2
mkdir -p bench/out
cc -O2 -o bench/out/forkexec bench/forkexec.c

base=$(bench/out/forkexec "$ITER" 1)
out=$(psql -X -q -v iterations="$ITER" -f bench/exec.sql)
mesh=$(echo "$out" | awk '/^median_ms/ {print $2}')
declare_ms=$(echo "$out" | awk '/^declare_ms/ {print $2}')
base_ms=$(echo "$base" | awk '{print $2}')
echo "latency   fork+exec /bin/true:        ${base_ms} ms (median of $ITER)"
echo "latency   mesh_exec true, warm:       ${mesh} ms (median of $ITER)"
awk -v m="$mesh" -v b="$base_ms" 'BEGIN { printf "ratio     mesh_exec / fork+exec:      %.2fx (target <= 2x)\n", m / b }'
echo "latency   mesh_acquire, no backend:   ${declare_ms} ms (median of $ITER; target < 1 ms)"

for c in $(seq 0 $((CLIENTS - 1))); do
  psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-run-$c', 'bench', 'bench'); SELECT exit_code FROM mesh_exec('bench-run-$c', ARRAY['true'])" >/dev/null
done
raw=$(bench/out/forkexec "$ITER" "$CLIENTS" | awk '{print $4}')
tps=$(pgbench -n -f bench/throughput.pgbench -c "$CLIENTS" -j "$CLIENTS" -t "$ITER" mesh_test 2>/dev/null \
      | awk '/^tps/ {print $3; exit}')
echo "throughput fork+exec, $CLIENTS processes:    ${raw}/s"
echo "throughput mesh_exec, $CLIENTS runs:          ${tps}/s"
awk -v t="$tps" -v r="$raw" 'BEGIN { printf "ratio     mesh_exec / fork+exec rate: %.2f (target >= 0.5)\n", t / r }'
