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
psql -X -qAt -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
tps=$(pgbench -n -f bench/throughput.pgbench -c "$CLIENTS" -j "$CLIENTS" -t "$ITER" mesh_test 2>/dev/null \
      | awk '/^tps/ {print $3; exit}')
echo "throughput fork+exec, $CLIENTS processes:    ${raw}/s"
echo "throughput mesh_exec, $CLIENTS runs:          ${tps}/s"
awk -v t="$tps" -v r="$raw" 'BEGIN { printf "ratio     mesh_exec / fork+exec rate: %.2f (target >= 0.5)\n", t / r }'
# WAL fsyncs per exec (server-wide): the workers' one flush per loop turn shares them between calls
psql -X -qAt -c "SELECT 'wal       fdatasyncs per exec, $CLIENTS runs:  ' || round(wal_sync::numeric / ($CLIENTS * $ITER), 2) FROM pg_stat_wal"

# CPU per warm exec: what the whole server (backend, mesh worker, embedded daemon, sandbox)
# spends on one mesh_exec('true'), and the mesh workers' share, vs a bare fork+exec's own.
pm=$(head -1 "$WORK/pg/data/postmaster.pid")
workers=$(ps --ppid "$pm" -o pid=,args= | awk '/mesh worker/ {print $1}')
psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-cpu', 'bench', 'bench'); SELECT exit_code FROM mesh_exec('bench-cpu', ARRAY['true'])" >/dev/null
cpu_before=$(tree_cpu_ms "$pm"); w_before=0
for w in $workers; do w_before=$((w_before + $(tree_cpu_ms "$w"))); done
psql -X -q -c "DO \$\$ BEGIN FOR i IN 1..$ITER LOOP PERFORM mesh_exec('bench-cpu', ARRAY['true']); END LOOP; END \$\$"
cpu_after=$(tree_cpu_ms "$pm"); w_after=0
for w in $workers; do w_after=$((w_after + $(tree_cpu_ms "$w"))); done
base_cpu=$( { /usr/bin/time -f '%U %S' bench/out/forkexec "$ITER" 1 >/dev/null; } 2>&1 | awk '{print ($1 + $2) * 1000}')
awk -v a="$cpu_after" -v b="$cpu_before" -v n="$ITER" -v wa="$w_after" -v wb="$w_before" -v f="$base_cpu" 'BEGIN {
  printf "cpu       mesh_exec true, warm:       %.2f ms per exec (mesh workers %.2f ms)\n", (a - b) / n, (wa - wb) / n
  printf "cpu       fork+exec /bin/true:        %.2f ms per exec\n", f / n }'
