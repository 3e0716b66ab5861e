#!/usr/bin/env bash
# bench/group_commit.sh: WAL fdatasyncs per warm exec with and without the workers' group
# commit (mesh.worker_group_commit_delay), at 1 and CLIENTS clients, in one run; then the
# foreground latency of mesh_exec while a background command streams output, vs quiet.
#
#   bench/group_commit.sh [ITERATIONS] [CLIENTS]     (as root, or not: see bench/lib.sh)
#
# Each phase runs pgbench (bench/throughput.pgbench: one run per client, exec-ing `true`)
# ITERATIONS times per client with the delay set by ALTER SYSTEM (0: every turn flushes at
# once, the behaviour before group commit; 2 ms: the default), and counts pg_stat_wal.wal_sync
# over it.  A process reports its WAL statistics at most once a second, after a transaction:
# before and after each phase the script waits 1.1 s and makes one exec in each run, so every
# worker reports what it held (those execs are counted too).
# Rows: fsync_per_exec DELAY_MS CLIENTS VALUE, tps DELAY_MS CLIENTS VALUE, latency p50/p99.
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-400}
CLIENTS=${2:-4}
. bench/lib.sh
bench_cluster 2
export PGOPTIONS="-c client_min_messages=warning -c synchronous_commit=off"
psql -X -q -f bench/exec.sql
q() { psql -X -qAt -v ON_ERROR_STOP=1 "$@"; }

for c in $(seq 0 $((CLIENTS - 1))); do
  q -c "SELECT 1 FROM mesh_acquire('bench-run-$c', 'bench', 'bench')" \
    -c "CALL bench.warm_exec('bench-run-$c', 3, NULL)" >/dev/null
done

# settle N: every run's worker reports its pending WAL statistics (one exec in each of N runs)
settle() {
  sleep 1.1
  for c in $(seq 0 $(($1 - 1))); do q -c "CALL bench.warm_exec('bench-run-$c', 1, NULL)" >/dev/null; done
}

# phase DELAY_MS NCLIENTS: fdatasyncs per exec, tps, and per-call latency p50/p99 (ms)
phase() {
  q -c "ALTER SYSTEM SET mesh.worker_group_commit_delay = '$1ms'" -c "SELECT pg_reload_conf()" >/dev/null
  settle "$CLIENTS"
  q -c "SELECT pg_stat_reset_shared('wal')" >/dev/null
  rm -f "$WORK"/pgbench.[0-9]*
  (cd "$WORK" && pgbench -n -f "$OLDPWD/bench/throughput.pgbench" -c "$2" -j "$2" -t "$ITER" \
     -l --log-prefix=pgbench mesh_test > pgbench.out 2> pgbench.err) ||
    { cat "$WORK/pgbench.err" >&2; exit 1; }
  local tps lat
  tps=$(awk '/^tps/ {print $3; exit}' "$WORK/pgbench.out")
  lat=$(cat "$WORK"/pgbench.[0-9]* | awk '{ print $3 / 1000 }' | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.3f %.3f", v[int(NR * 0.5) + 1], v[int(NR * 0.99) + 1] }')
  settle "$2"
  local fs
  fs=$(q -c "SELECT round(wal_sync::numeric / ($2 * $ITER + $2), 3) FROM pg_stat_wal")
  printf '%-16s delay=%sms clients=%s  fsync/exec %s  tps %s  latency p50/p99 %s ms\n' \
    group_commit "$1" "$2" "$fs" "$tps" "$lat"
}

for d in 0 2; do
  phase "$d" 1
  phase "$d" "$CLIENTS"
done

# --- foreground latency while a background command streams ------------------------------
q -c "SELECT 1 FROM mesh_acquire('bench-bg', 'bench', 'bench')" \
  -c "CALL bench.warm_exec('bench-bg', 1, NULL)" >/dev/null
q -c "ALTER SYSTEM RESET mesh.worker_group_commit_delay" -c "SELECT pg_reload_conf()" >/dev/null
fg() {
  rm -f "$WORK"/pgbench.[0-9]*
  (cd "$WORK" && pgbench -n -f "$OLDPWD/bench/throughput.pgbench" -c 1 -j 1 -t "$ITER" \
     -l --log-prefix=pgbench mesh_test > pgbench.out 2> pgbench.err) ||
    { cat "$WORK/pgbench.err" >&2; exit 1; }
  cat "$WORK"/pgbench.[0-9]* | awk '{ print $3 / 1000 }' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.3f %.3f", v[int(NR * 0.5) + 1], v[int(NR * 0.99) + 1] }'
}
quiet=$(fg)
id=$(q -c "SELECT mesh_exec_start('bench-bg', ARRAY['sh', '-c', 'while :; do seq 1 2000; sleep 0.01; done'])")
sleep 1
busy=$(fg)
q -c "SELECT mesh_exec_kill($id)" >/dev/null || true
printf 'foreground exec p50/p99 ms: quiet %s, background streaming %s\n' "$quiet" "$busy"
