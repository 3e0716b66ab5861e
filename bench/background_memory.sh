#!/usr/bin/env bash
# bench/background_memory.sh: what many chatty background commands cost mesh in memory.
#
#   sudo bench/background_memory.sh [COMMANDS] [SECONDS]
#
# COMMANDS (default 256) background commands, 16 a run (the default
# mesh.settings.max_background_per_run), each printing lines as fast as it can (`yes`), are
# followed for SECONDS (default 20) by the default two mesh workers and the embedded daemon.
# The figure is the growth of their private memory together (RssAnon, sampled every 0.2 s, its
# peak) against the target of 512 MiB: each command's output waits in a bounded buffer of the
# daemon's, and blocks on its pipe when that is full, instead of growing memory.  Their peak
# resident memory (VmHWM after a reset through /proc/PID/clear_refs, root) is shown too: it
# also counts the pages of shared_buffers a worker touched while storing.  Then every run is
# released (which must work with all of them running).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMANDS=${1:-256}
SECONDS_FOLLOWED=${2:-20}
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
anon_before=$(total RssAnon)
daemon_anon_before=$(kib "$daemon" RssAnon)

started=0
for r in $(seq 1 "$runs"); do
  n=$(( COMMANDS - started < PER_RUN ? COMMANDS - started : PER_RUN ))
  psql -X -qAt -v ON_ERROR_STOP=1 \
       -c "SELECT mesh_exec_start('bench-bgmem-$r', ARRAY['yes', 'chatty background command $r'])
             FROM generate_series(1, $n)" >/dev/null
  started=$((started + n))
done
anon_peak=0; daemon_anon_peak=0
for _ in $(seq 1 $((SECONDS_FOLLOWED * 5))); do
  a=$(total RssAnon); [ "$a" -gt "$anon_peak" ] && anon_peak=$a
  a=$(kib "$daemon" RssAnon); [ "$a" -gt "$daemon_anon_peak" ] && daemon_anon_peak=$a
  sleep 0.2
done

peak=$(total VmHWM)
stored=$(psql -X -qAt -c "SELECT pg_size_pretty(sum(stdout_bytes)) FROM mesh.execs
                            WHERE run_id LIKE 'bench-bgmem-%' AND background")
running=$(psql -X -qAt -c "SELECT count(*) FROM mesh.execs
                             WHERE run_id LIKE 'bench-bgmem-%' AND background AND status = 'running'")
t0=$(date +%s.%N)
for r in $(seq 1 "$runs"); do psql -X -qAt -c "SELECT mesh_release('bench-bgmem-$r')" >/dev/null; done
released=$(echo "$(date +%s.%N) - $t0" | bc)
awk -v b="$before" -v p="$peak" -v n="$started" -v s="$SECONDS_FOLLOWED" -v k="$running" \
    -v st="$stored" -v rel="$released" -v runs="$runs" -v a="$((anon_peak - anon_before))" \
    -v d="$((daemon_anon_peak - daemon_anon_before))" 'BEGIN {
  printf "%d chatty background commands (%d running at the end) followed %d s, %s stored\n", n, k, s, st
  printf "workers + daemon private memory: +%.0f MiB at peak (target <= 512 MiB), the daemon +%.0f MiB of it\n",
         a / 1024, d / 1024
  printf "workers + daemon resident memory, shared buffers touched included: +%.0f MiB at peak\n", (p - b) / 1024
  printf "%d runs released in %.1f s\n", runs, rel }'
