#!/usr/bin/env bash
# bench/run.sh: issue 14's performance figures, each against a baseline measured in the same
# run, with its target; then where the time of one call goes.
#
#   bench/run.sh [ITERATIONS] [CLIENTS] [BURST]      (as root, or not: see bench/lib.sh)
#
# ITERATIONS (default 300) sizes every loop: warm execs, acquires, the CPU sample and each
# client's share of the concurrent runs; cold starts are ITERATIONS/6, the daemon-alone
# measurement (bench/sandboxd/run.sh) ITERATIONS*2/3.  BURST (default 100) runs start at once
# (bench/burst.sh).  About 2 minutes by default on 2 cores.
#
# Rows of the first table (key, what, median, p99, its baseline, ratio, target):
#   warm_exec      SELECT mesh_exec(run, '{true}') in a warm workspace, timed in the server,
#                  vs a bare fork+exec+wait of /bin/true (bench/forkexec.c)
#   warm_idle      the same, each call 200 ms after the last one ended (a harness thinks between
#                  commands; ITERATIONS/10 calls), vs a fork+exec after the same pause: the
#                  latency agents see, against what an idle moment costs a bare process too
#   warm_stream    the same warm exec while STREAMS (BENCH_STREAMS, default 4) background
#                  commands of other runs stream output (a line every 10 ms each), vs the warm
#                  exec with none, in alternating rounds: the target is on the p99
#   sandboxd       mesh-sandboxd alone, warm exec over HTTP keep-alive, vs its own fork+exec
#   concurrent     CLIENTS runs exec-ing `true` at once (pgbench), execs/s, vs CLIENTS
#                  processes doing bare fork+exec; concurrent_lat: their per-call latency
#   acquire        mesh_acquire of a fresh run (no backend call), against the absolute target;
#                  the ratio is to a bare fork+exec, this machine's yardstick
#   cold_start     a fresh run's mesh_acquire until its first mesh_exec of `true` returns, vs
#                  a bare bwrap sandbox running `true` with the holder's own flags (read from
#                  the live holder's command line; its seccomp filter is an allow-all one)
#   burst          BURST fresh runs acquire and exec at the same instant (bench/burst.sh): p50
#                  and p99 of their time to first exec, vs the ideal: BURST x a single cold
#                  start (measured by the same script, one client) / cores; target on the p99
#   cpu_per_exec   CPU of all the cluster's processes (postmaster and descendants, the
#                  embedded daemon and what it runs included) per warm exec, vs the CPU of a
#                  bare fork+exec; cpu_workers: the mesh workers' share of it
#   cpu_bound      execs/s the cores allow at cpu_per_exec (cores x 1000 / CPU ms), vs the
#                  same for a fork+exec: the most concurrent runs can reach once the CPU is the
#                  limit; cpu_bound_sd: the same with mesh-sandboxd's own CPU per exec (its run,
#                  as root), what a cost-free extension would leave
#   fsync_per_exec WAL fdatasyncs (pg_stat_wal) per exec under the concurrent runs, vs the
#                  one flush a synchronously committed transaction makes: a figure the
#                  machine's noise does not move; flush_waits the flushes the workers' turns
#                  waited for (mesh.stat_workers.wal_flushes), the rest being the WAL
#                  writer's and other processes'
# Then the targets (issue 29) in a compact table, each a ratio to its baseline with met/MISSED.
# The last table: mesh.call_stages() over the burst, the warm execs and the acquires, and a
# note on what its stages count.
# The load average at start and end is printed, with a warning when other work competed.
# Both tables also go to bench/out/run.md as markdown (README.md's Performance table).
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-300}
CLIENTS=${2:-4}
BURST_N=${3:-100}
BURST_SINGLES=$(( ITER / 30 > 3 ? ITER / 30 : 3 ))
STREAMS=${BENCH_STREAMS:-4}
COLD=$(( ITER / 6 > 3 ? ITER / 6 : 3 ))
SANDBOXD_ITER=$(( ITER * 2 / 3 > 3 ? ITER * 2 / 3 : 3 ))
CORES=$(nproc)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

. bench/lib.sh
bench_cluster 2 "max_connections = $(( BURST_N + 20 ))"
. bench/burst.sh
mkdir -p bench/out
cc -O2 -Wall -Wextra -Werror -o bench/out/forkexec bench/forkexec.c
export PGOPTIONS="-c client_min_messages=warning -c synchronous_commit=off"
psql -X -q -f bench/exec.sql
q() { psql -X -qAt -v ON_ERROR_STOP=1 "$@"; }
# field NAME LINE: the value after NAME in a "name value name value" line
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }' <<<"$2"; }
# summary FIGURE: median and p99 of the figure's samples in bench.samples
summary() { q -F' ' -c "SELECT round(median_ms::numeric, 4), round(p99_ms::numeric, 4) FROM bench.summary('$1')"; }

# Baseline and figure alternate in ROUNDS rounds, so that what else the machine does drifts
# into both alike; each figure is summed up over all its rounds.
ROUNDS=5
# share N: one round's share of N iterations (at least 1)
share() { echo $(( $1 / ROUNDS > 0 ? $1 / ROUNDS : 1 )); }
MODEL=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
MEM_GIB=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
echo "bench/run.sh: $(( $(share "$ITER") * ROUNDS )) iterations, $CLIENTS clients, $(( $(share "$COLD") * ROUNDS )) cold starts," \
     "a burst of $BURST_N, $STREAMS streams; $MODEL, $CORES cores, $MEM_GIB GiB; load average at start $LOAD_START"

# percentiles FILE: median and p99 of the samples in FILE (interpolated, as percentile_cont)
percentiles() {
  sort -g "$1" | awk '{ v[NR] = $1 }
    function pct(p,  x, i) { x = (NR - 1) * p + 1; i = int(x); return v[i] + (x - i) * (v[i + 1 > NR ? NR : i + 1] - v[i]) }
    END { printf "%.4f %.4f\n", pct(0.5), pct(0.99) }'
}

# --- warm exec vs fork+exec, and the CPU each costs ------------------------------------
q -c "SELECT 1 FROM mesh_acquire('bench-warm', 'bench', 'bench')" \
  -c "CALL bench.warm_exec('bench-warm', 10, NULL)" >/dev/null
for _ in $(seq $ROUNDS); do
  bench/out/forkexec -o "$WORK/fork.ms" "$(share "$ITER")" >> "$WORK/fork.out"
  q -c "CALL bench.warm_exec('bench-warm', $(share "$ITER"))"
done
read -r fork_med fork_p99 < <(percentiles "$WORK/fork.ms")
fork_cpu=$(awk '{ for (i = 1; i < NF; i++) if ($i == "cpu_ms") { t += $(i + 1); n++ } } END { printf "%.4f", t / n }' "$WORK/fork.out")
read -r warm_med warm_p99 < <(summary warm_exec)
# read in the same session as the execs, so that no psql start or backend exit is counted
q -c "\\! bash -c '. bench/lib.sh; bench_cpu_ms' > $WORK/cpu.before" \
  -c "CALL bench.warm_exec('bench-warm', $ITER, NULL)" \
  -c "\\! bash -c '. bench/lib.sh; bench_cpu_ms' > $WORK/cpu.after"
read -r cpu_ms cpu_workers_ms < <(paste -d' ' "$WORK/cpu.before" "$WORK/cpu.after" |
  awk -v n="$ITER" '{ printf "%.4f %.4f\n", ($3 - $1) / n, ($4 - $2) / n }')

# --- warm exec after an idle moment ----------------------------------------------------
IDLE=$(( ITER / 10 > 3 ? ITER / 10 : 3 ))
bench/out/forkexec -g 200 -o "$WORK/fork_idle.ms" "$IDLE" > /dev/null
q -c "CALL bench.warm_exec('bench-warm', $IDLE, 'warm_idle', 0.2)"
read -r fork_idle_med fork_idle_p99 < <(percentiles "$WORK/fork_idle.ms")
read -r idle_med idle_p99 < <(summary warm_idle)

# --- warm exec while background commands stream, vs quiet -----------------------------
# each prints a numbered line every 10 ms (bash builtins: read times out on a FIFO no one
# writes), so that the streaming, not the command, is what competes with the warm execs
# shellcheck disable=SC2016  # expanded by the sandbox's bash, not here
STREAMER='rm -f .bench-fifo; mkfifo .bench-fifo; exec 3<> .bench-fifo; i=0
while :; do i=$((i + 1)); echo "line $i of a background command streaming its output"; read -t 0.01 -u 3 || :; done'
for b in $(seq 1 "$STREAMS"); do
  q -c "SELECT 1 FROM mesh_acquire('bench-bg-$b', 'bench', 'bench')" \
    -c "CALL bench.warm_exec('bench-bg-$b', 1, NULL)" >/dev/null
done
for _ in $(seq $ROUNDS); do
  q -c "CALL bench.warm_exec('bench-warm', $(share "$ITER"), 'warm_quiet')"
  for b in $(seq 1 "$STREAMS"); do
    q -v s="$STREAMER" <<<"SELECT mesh_exec_start('bench-bg-$b', ARRAY['bash', '-c', :'s'])"
  done > "$WORK/streams"
  sleep 0.3
  q -c "CALL bench.warm_exec('bench-warm', $(share "$ITER"), 'warm_stream')"
  q -c "SELECT count(mesh_exec_kill(id)) FROM unnest('{$(paste -sd, "$WORK/streams")}'::bigint[]) id" >/dev/null
done
read -r quiet_med quiet_p99 < <(summary warm_quiet)
read -r stream_med stream_p99 < <(summary warm_stream)

# --- acquire ---------------------------------------------------------------------------
q -c "CALL bench.acquire($ITER)"
read -r acq_med acq_p99 < <(summary acquire)

# --- cold start vs a bare bwrap sandbox with the holder's flags ------------------------
daemon=$(pgrep -f "state-dir $PGHOST/data/mesh_sandboxd( |$)" | head -1)
baseline_holder_cmdline "$PGHOST/data/mesh_sandboxd" "${daemon:-0}" "$WORK/bare" ||
  { echo "bench: no holder found under the embedded mesh-sandboxd (${daemon:-none})" >&2; exit 1; }
mapfile -d '' -t holder_argv < "$WORK/bare/holder-cmdline"
holder_uid=$(cat "$WORK/bare/holder-uid")
# the sandbox's own command (the exec agent, from a descriptor) follows bwrap's last "--"
end=-1
for i in "${!holder_argv[@]}"; do [ "${holder_argv[i]}" != "--" ] || end=$i; done
[ "$end" -gt 0 ] ||
  { echo "bench: unexpected holder command line: ${holder_argv[*]}" >&2; exit 1; }
bwrap_argv=("${holder_argv[@]:0:end+1}" true)
printf '\x06\x00\x00\x00\x00\x00\xff\x7f' > "$WORK/allow-all.bpf"   # BPF_RET|BPF_K ALLOW
uid_opt=(); [ "$(id -u)" -ne 0 ] || uid_opt=(-u "$holder_uid")
for _ in $(seq $ROUNDS); do
  bench/out/forkexec "${uid_opt[@]}" -i "4=$WORK/allow-all.bpf" -o "$WORK/bwrap.ms" \
    "$(share "$COLD")" 1 -- "${bwrap_argv[@]}" 3>/dev/null >/dev/null
  q -c "CALL bench.cold_start($(share "$COLD"))"
done
read -r bwrap_med bwrap_p99 < <(percentiles "$WORK/bwrap.ms")
read -r cold_med cold_p99 < <(summary cold_start)

# --- a burst: BURST_N runs acquire and make their first exec at once (bench/burst.sh) --
burst_measure "$BURST_N" "$BURST_SINGLES"

# --- concurrent runs vs the raw fork+exec rate of as many processes ---------------------
for c in $(seq 0 $((CLIENTS - 1))); do
  q -c "SELECT 1 FROM mesh_acquire('bench-run-$c', 'bench', 'bench')" \
    -c "CALL bench.warm_exec('bench-run-$c', 1, NULL)" >/dev/null
done
raw=$(bench/out/forkexec "$ITER" "$CLIENTS")
q -c "SELECT pg_stat_reset_shared('wal')" -c "SELECT mesh.stat_reset()" >/dev/null
(cd "$WORK" && pgbench -n -f "$OLDPWD/bench/throughput.pgbench" -c "$CLIENTS" -j "$CLIENTS" -t "$ITER" \
   -l --log-prefix=pgbench mesh_test > pgbench.out 2> pgbench.err) ||
  { cat "$WORK/pgbench.err" >&2; exit 1; }
tps=$(awk '/^tps/ {print $3; exit}' "$WORK/pgbench.out")
cat "$WORK"/pgbench.[0-9]* | awk '{ print $3 / 1000 }' > "$WORK/concurrent.ms"
read -r conc_med conc_p99 < <(percentiles "$WORK/concurrent.ms")

# --- mesh-sandboxd alone (its own daemon and baseline, bench/sandboxd/run.sh) ----------
sd_out=$(bash bench/sandboxd/run.sh "$SANDBOXD_ITER" 2>&1) || [ $? -eq 3 ] ||
  { echo "$sd_out" >&2; exit 1; }
sd_fork=$(awk '/^fork_exec +median/ {print $3}' <<<"$sd_out")
sd_warm=$(awk '/^warm_exec +median/ {print $3}' <<<"$sd_out")
sd_warm_p99=$(awk '/^warm_exec +p99/ {print $3}' <<<"$sd_out")
sd_fork_p99=$(awk '/^fork_exec +p99/ {print $3}' <<<"$sd_out")
# the daemon's own CPU per warm exec (daemon, sandbox and command), when it could be measured
sd_cpu=$(awk '/^CPU per warm exec/ && $5 ~ /^[0-9.]+$/ {print $5}' <<<"$sd_out")
sd_fork_cpu=$(field fork_exec "$(grep '^CPU per warm exec' <<<"$sd_out")")

# WAL fdatasyncs of the concurrent runs: a process reports its WAL statistics at most once a
# second, after a transaction, so now (seconds later) one more exec in each run has every
# worker report what it still held; those execs are counted too
for c in $(seq 0 $((CLIENTS - 1))); do
  q -c "CALL bench.warm_exec('bench-run-$c', 1, NULL)" >/dev/null
done
fsyncs=$(q -c "SELECT round(wal_sync::numeric / ($CLIENTS * ($ITER + 1)), 4) FROM pg_stat_wal")
worker_flushes=$(q -c "SELECT round(sum(wal_flushes)::numeric / ($CLIENTS * ($ITER + 1)), 4) FROM mesh.stat_workers")

# --- the table (also as markdown rows in bench/out/run.md, for README.md's Performance) --
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
MD=bench/out/run.md
{
  echo "<!-- bench/run.sh $ITER $CLIENTS $BURST_N, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $MODEL, $CORES cores, $MEM_GIB GiB, load $LOAD_START at start, $LOAD_END at end -->"
  echo "| figure | what | median (p99) | baseline | median (p99) | ratio | target |"
  echo "|---|---|---|---|---|---|---|"
} > "$MD"
# row KEY WHAT UNIT MEDIAN P99 BASELINE BASE_MEDIAN BASE_P99 CHECK TARGET: CHECK is a
# condition on r (the medians' ratio), q (the p99s' ratio: then it is the ratio printed) or m
# (the median), or "-" for a figure that has no target
row() {
  awk -v key="$1" -v what="$2" -v unit="$3" -v m="$4" -v p="${5:--}" -v bw="$6" -v b="$7" \
      -v bp="${8:--}" -v check="${9}" -v target="${10}" -v md="$MD" '
    function with_p99(v, p) { return sprintf("%.3f %s", v, unit) (p == "-" ? "" : sprintf(" (%.3f)", p)) }
    BEGIN {
      split(check, c, " ")
      r = c[1] == "q" ? p / bp : m / b
      # a ratio is judged only when its figures were measured (a few execs may take less CPU
      # than one clock tick; a burst whose every run failed has no p99)
      num = "^[0-9]+(\\.[0-9]+)?$"
      valid = c[1] == "q" ? p ~ num && bp ~ num && bp > 0 : c[1] == "m" ? m ~ num : m ~ num && b ~ num && b > 0
      if (check == "-") met = "-"
      else if (!valid) met = "unmeasured"
      else {
        x = c[1] == "m" ? m : r
        met = (c[2] == "<=" && x <= c[3]) || (c[2] == "<" && x < c[3]) || (c[2] == ">=" && x >= c[3]) ? "met" : "MISSED"
      }
      printf "%-14s %-44s %-5s %9.3f %9s   %-34s %9.3f %9s %8.2fx  %-9s %s\n",
        key, what, unit, m, p == "-" ? "-" : sprintf("%.3f", p), bw, b, bp == "-" ? "-" : sprintf("%.3f", bp), r, target, met
      gsub(/^ +/, "", what); gsub(/^ +/, "", bw)
      printf "| `%s` | %s | %s | %s | %s | **%.2fx** | %s%s |\n", key, what, with_p99(m, p), bw, with_p99(b, bp), r,
        target == "-" ? "" : target, met == "-" ? "" : ": " tolower(met) >> md
    }'
}
echo
printf '%-14s %-44s %-5s %9s %9s   %-34s %9s %9s %9s  %-9s %s\n' figure what unit median p99 \
  baseline median p99 ratio target ""
row warm_exec "mesh_exec(run, '{true}'), warm" ms "$warm_med" "$warm_p99" \
  "fork+exec /bin/true" "$fork_med" "$fork_p99" "r <= 2.0" "<= 2.0x"
row warm_idle "  the same, 200 ms after the last call" ms "$idle_med" "$idle_p99" \
  "  fork+exec, 200 ms after the last" "$fork_idle_med" "$fork_idle_p99" - "(report)"
row sandboxd "mesh-sandboxd alone: warm exec over HTTP" ms "$sd_warm" "$sd_warm_p99" \
  "fork+exec /bin/true (its own run)" "$sd_fork" "$sd_fork_p99" "r <= 1.1" "<= 1.1x"
row warm_stream "  the same, while $STREAMS background cmds stream" ms "$stream_med" "$stream_p99" \
  "  the same, quiet (alternate rounds)" "$quiet_med" "$quiet_p99" "q <= 1.2" "p99 <= 1.2x"
row concurrent "$CLIENTS runs exec-ing true at once" "/s" "$tps" - \
  "fork+exec, $CLIENTS processes" "$(field rate_per_s "$raw")" - "r >= 0.7" ">= 0.7x"
row concurrent_lat "  their per-call latency (pgbench)" ms "$conc_med" "$conc_p99" \
  "  fork+exec, $CLIENTS processes" "$(field median_ms "$raw")" "$(field p99_ms "$raw")" - "-"
row acquire "mesh_acquire, no backend call" ms "$acq_med" "$acq_p99" \
  "fork+exec /bin/true (yardstick)" "$fork_med" "$fork_p99" "m < 1" "< 1 ms"
row cold_start "acquire -> first mesh_exec of true returns" ms "$cold_med" "$cold_p99" \
  "bwrap true, the holder's flags" "$bwrap_med" "$bwrap_p99" "r <= 2.0" "<= 2.0x"
row burst "$BURST_N runs at once: acquire -> first exec" ms "$BURST_P50" "$BURST_P99" \
  "ideal: $BURST_N x cold start / $CORES cores" "$BURST_IDEAL" "$BURST_IDEAL" "q <= 1.5" "p99 <= 1.5x"
row cpu_per_exec "CPU per warm exec: cluster + daemon" ms "$cpu_ms" - \
  "CPU of a fork+exec /bin/true" "$fork_cpu" - "r <= 1.2" "<= 1.2x"
row cpu_workers "  of which the mesh workers" ms "$cpu_workers_ms" - \
  "  CPU of a fork+exec /bin/true" "$fork_cpu" - - "(report)"
# on a machine the concurrent runs keep busy, CPU per exec bounds the rate: CORES seconds of
# CPU a second over CPU per exec, against fork+exec's (the second row: a free extension)
# (CPU is read in clock ticks: a run of a few execs may measure none, and then says so)
cpu_rate() { awk -v c="$CORES" -v ms="$1" 'BEGIN { printf "%.1f", c * 1000 / ms }'; }
measured() { awk -v ms="$1" 'BEGIN { exit !(ms > 0) }'; }
if measured "$cpu_ms" && measured "$fork_cpu"; then
  row cpu_bound "execs/s $CORES cores allow at that CPU per exec" /s "$(cpu_rate "$cpu_ms")" - \
    "fork+execs/s at theirs" "$(cpu_rate "$fork_cpu")" - - "(report)"
else
  echo "cpu_bound      (too few execs for their CPU to be measured: run more iterations)"
fi
measured "${sd_cpu:-0}" && measured "${sd_fork_cpu:-0}" && row cpu_bound_sd "  with mesh-sandboxd's CPU alone" /s "$(cpu_rate "$sd_cpu")" - \
  "  fork+execs/s at theirs (its own run)" "$(cpu_rate "$sd_fork_cpu")" - - "(report)"
row fsync_per_exec "WAL fdatasyncs per exec, the concurrent runs" /exec "$fsyncs" - \
  "a synchronous commit's one flush" 1 - "m <= 0.3" "<= 0.3"
row flush_waits "  of which the workers' turns waited for" /exec "$worker_flushes" - \
  "a synchronous commit's one flush" 1 - - "(report)"
echo
echo "load average: $LOAD_START at start, $LOAD_END at end ($CORES cores)"
printf '\nLoad average %s at start, %s at end (%d cores).\n' "$LOAD_START" "$LOAD_END" "$CORES" >> "$MD"
awk -v s="${LOAD_START%% *}" -v e="${LOAD_END%% *}" -v c="$CORES" 'BEGIN {
  if (s > c / 2 || e > c)
    printf "WARNING: other work competed with this run (1-minute load %s at start, %s at end on %d cores; this run alone adds about 1): the figures are unreliable, re-run on a quiet machine\n", s, e, c }' |
  tee -a "$MD"

# --- the burst's figures, then the targets (issue 29), each a ratio to its baseline ------
echo
burst_summary
printf '\n%s\n' "$(burst_summary | head -1)" >> "$MD"
echo
echo "targets: each a ratio to a baseline measured in this run"
printf '\n| target | measured | baseline (same run) | ratio | target | |\n|---|---|---|---|---|---|\n' >> "$MD"
# target WHAT VALUE BASELINE UNIT OP LIMIT: one row, the ratio VALUE / BASELINE against LIMIT
target() {
  awk -v what="$1" -v v="$2" -v b="$3" -v unit="$4" -v op="$5" -v t="$6" -v md="$MD" 'BEGIN {
    r = v / b
    if (!(v ~ /^[0-9]+(\.[0-9]+)?$/ && b ~ /^[0-9]+(\.[0-9]+)?$/ && b > 0)) met = "unmeasured"
    else met = (op == "<=" && r <= t) || (op == ">=" && r >= t) ? "met" : "MISSED"
    printf "  %-54s %10.3f %10.3f %-5s %7.2fx  %s %.1fx  %s\n", what, v, b, unit, r, op, t, met
    printf "| %s | %.3f %s | %.3f %s | **%.2fx** | %s %.1fx | %s |\n", what, v, unit, b, unit, r, op, t, tolower(met) >> md
  }'
}
printf '  %-54s %10s %10s %-5s %8s  %-7s %s\n' what measured baseline unit ratio target ""
target "warm exec median / fork+exec median" "$warm_med" "$fork_med" ms "<=" 2.0
target "$CLIENTS-concurrent exec rate / $CLIENTS processes' fork+exec rate" "$tps" "$(field rate_per_s "$raw")" /s ">=" 0.7
target "WAL fdatasyncs per exec at $CLIENTS clients / one flush" "$fsyncs" 1 /exec "<=" 0.3
target "CPU per warm exec / a fork+exec's CPU" "$cpu_ms" "$fork_cpu" ms "<=" 1.2
target "exec p99 while $STREAMS background cmds stream / quiet p99" "$stream_p99" "$quiet_p99" ms "<=" 1.2
target "burst of $BURST_N: p99 time to first exec / ideal" "$BURST_P99" "$BURST_IDEAL" ms "<=" 1.5

# --- last table: where the time goes (mesh.call_stages) --------------------------------
echo
if [ "$(q -c "SELECT to_regprocedure('mesh.call_stages()') IS NOT NULL")" != t ]; then
  echo "stages: mesh.call_stages() is not in this build: no per-stage breakdown"
  printf '\nNo per-stage breakdown: mesh.call_stages() is not in this build.\n' >> "$MD"
  exit 0
fi
# stages PHASE: the counters since the last reset, in the function's own order, each stage's
# time per call and its share of the op's total
stages() {
  q -F' ' -c "SELECT op, stage, calls, round(total_ms::numeric, 3), round((total_ms / calls)::numeric, 4),
                     coalesce(round((100 * total_ms / nullif(sum(total_ms) FILTER (WHERE stage = 'total')
                                                        OVER (PARTITION BY op), 0))::numeric, 1)::text, '-')
              FROM mesh.call_stages() WITH ORDINALITY AS s(op, stage, calls, total_ms, n)
              WHERE calls > 0 ORDER BY n" |
    awk -v phase="$1" -v md="$MD" '{
      printf "%-12s %-10s %-14s %8s %12s %12s %8s\n", phase, $1, $2, $3, $4, $5, $6
      printf "| %s | %s | %s | %s | %s | %s | %s |\n", phase, $1, $2, $3, $4, $5, $6 >> md }'
}
STAGE_ITER=$(( ITER / 3 > 3 ? ITER / 3 : 3 ))
printf '%-12s %-10s %-14s %8s %12s %12s %8s\n' phase op stage calls total_ms ms_per_call "%_total"
printf '\n| phase | op | stage | calls | total ms | ms per call | %% of total |\n|---|---|---|---|---|---|---|\n' >> "$MD"
# the burst's, read after it (bench/burst.sh), with "other": what its stages leave of the total
awk -v md="$MD" '{ printf "%-12s %-10s %-14s %8s %12s %12s %8s\n", "burst", $1, $2, $3, $4, $5, $6
                   printf "| burst | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 >> md }' <<<"$BURST_STAGES"
q -c "SELECT mesh.call_stages_reset()" -c "CALL bench.warm_exec('bench-warm', $STAGE_ITER, NULL)" >/dev/null
stages warm_exec
q -c "SELECT mesh.call_stages_reset()" -c "CALL bench.acquire($STAGE_ITER, 'stages')" >/dev/null
stages acquire
STAGES_NOTE="The stages are disjoint parts of each call's wait, so they add up to at most its total
(test/e2e/call_stages.t): http spans the call's driver run (an exec's row is written to the
WAL files first); worker_txn is the call's own transactions and the WAL flush of the loop turn that
sends its reply; what they leave of the total is the caller's own set-up of the call and the
call's wait behind other calls in the worker's loop."
printf '\n%s\n' "$STAGES_NOTE"
printf '\n%s\n' "$(tr '\n' ' ' <<<"$STAGES_NOTE" | sed 's/ $//')" >> "$MD"
