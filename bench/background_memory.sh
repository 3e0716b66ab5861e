#!/usr/bin/env bash
# bench/background_memory.sh: what many chatty background commands cost mesh in memory.
#
#   sudo bench/background_memory.sh [COMMANDS] [SECONDS]
#
# COMMANDS (default 256) background commands, 16 a run (the default
# mesh.settings.max_background_per_run), each printing lines as fast as it can (`yes`), are
# followed for SECONDS (default 30) by the default two mesh workers and the embedded daemon.
# The figure is the growth of their peak resident memory together (VmHWM after a reset through
# /proc/PID/clear_refs, root) against the target of 512 MiB: each command's output waits in a
# bounded buffer of the daemon's, and blocks on its pipe when that is full, instead of growing
# memory.  Then every run is released (which must work with all of them running).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMANDS=${1:-256}
SECONDS_FOLLOWED=${2:-30}
PER_RUN=16
. bench/lib.sh
bench_cluster 2

runs=$(( (COMMANDS + PER_RUN - 1) / PER_RUN ))
workers=$(psql -X -qAt -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE backend_type = 'mesh worker'")
daemon=$(pgrep -f -- "--socket $WORK/pg/data/mesh_sandboxd/sandboxd.sock")
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
total() { local sum=0 p; for p in $workers $daemon; do sum=$((sum + $(kib "$p" "$1"))); done; echo "$sum"; }

# the runs' workspaces first, so that the figure is the commands' alone
for r in $(seq 1 "$runs"); do
  psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-bgmem-$r', 'bench', 'bench')" \
               -c "SELECT exit_code FROM mesh_exec('bench-bgmem-$r', ARRAY['true'])" >/dev/null 2>&1
done
for p in $workers $daemon; do echo 5 > "/proc/$p/clear_refs"; done
before=$(total VmRSS)

started=0
for r in $(seq 1 "$runs"); do
  n=$(( COMMANDS - started < PER_RUN ? COMMANDS - started : PER_RUN ))
  psql -X -qAt -v ON_ERROR_STOP=1 \
       -c "SELECT mesh_exec_start('bench-bgmem-$r', ARRAY['yes', 'chatty background command $r'])
             FROM generate_series(1, $n)" >/dev/null
  started=$((started + n))
done
sleep "$SECONDS_FOLLOWED"

peak=$(total VmHWM)
stored=$(psql -X -qAt -c "SELECT pg_size_pretty(sum(stdout_bytes)) FROM mesh.execs
                            WHERE run_id LIKE 'bench-bgmem-%' AND background")
running=$(psql -X -qAt -c "SELECT count(*) FROM mesh.execs
                             WHERE run_id LIKE 'bench-bgmem-%' AND background AND status = 'running'")
t0=$(date +%s.%N)
for r in $(seq 1 "$runs"); do psql -X -qAt -c "SELECT mesh_release('bench-bgmem-$r')" >/dev/null; done
released=$(echo "$(date +%s.%N) - $t0" | bc)
awk -v b="$before" -v p="$peak" -v n="$started" -v s="$SECONDS_FOLLOWED" -v k="$running" \
    -v st="$stored" -v rel="$released" -v runs="$runs" 'BEGIN {
  printf "%d chatty background commands (%d running at the end) followed %d s, %s stored\n", n, k, s, st
  printf "workers + daemon resident memory: +%.0f MiB at peak (target <= 512 MiB)\n", (p - b) / 1024
  printf "%d runs released in %.1f s\n", runs, rel }'
