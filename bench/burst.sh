#!/usr/bin/env bash
# bench/burst.sh: N fresh runs acquire and make their first exec at the same instant, as a
# harness's fan-out does; their time to first exec against a single cold start, measured in
# the same run.
#
#   bench/burst.sh [N] [SINGLES]      (as root, or not: see bench/lib.sh)
#
# N (default 100) pgbench clients, connected first, each run bench/burst.pgbench once: a
# fresh run's mesh_acquire, then its first mesh_exec of `true` (the sandbox is created on it).
# A client's time to first exec runs from the burst's instant (the earliest client's start)
# until its exec returns, read from pgbench's per-transaction log.  A failure is a client
# that did not get exit status 0 (its error aborts it).  The single cold start is the same
# script with one client, SINGLES times (default 10), 0.2 s apart so that the daemon's
# standby holder is back each time; the ideal is N x its median / cores: the burst served
# as fast as the cores would serve the cold starts one after another.  mesh.call_stages()
# is reset before the burst and read after it: where the burst's time goes.
#
# bench/run.sh sources this file and calls burst_measure on its own cluster; run directly,
# it starts one (bench/lib.sh) and prints the figures and the stage table.

# burst_once N PREFIX OUT: N clients at once (run ids burst-PREFIX-<client>), each client's
# time to first exec (ms) to OUT, one a line; prints the number of failures; the runs are
# released after.
burst_once() {
  local n=$1 prefix=$2 out=$3 dir
  dir=$(mktemp -d "$WORK/burst.XXXXXX")
  chmod 755 "$dir"
  # pgbench exits non-zero when a client aborted: counted below, not fatal
  (cd "$dir" && pgbench -n -f "$OLDPWD/bench/burst.pgbench" -D prefix="$prefix" -c "$n" \
     -j "$(( n < 2 * CORES ? n : 2 * CORES ))" -t 1 -l --log-prefix=burst mesh_test \
     > pgbench.out 2> pgbench.err) || true
  # log lines: client, transaction, latency us, script, end epoch s, end us; the burst's
  # instant is the earliest start (end - latency)
  cat "$dir"/burst.[0-9]* 2>/dev/null |
    awk '{ e = $5 * 1e6 + $6; end[NR] = e; s = e - $3; if (NR == 1 || s < t0) t0 = s }
         END { for (i = 1; i <= NR; i++) printf "%.3f\n", (end[i] - t0) / 1000 }' > "$out"
  echo $(( n - $(wc -l < "$out") ))
  [ "$(wc -l < "$out")" -eq "$n" ] || grep -m3 -E 'aborted|ERROR' "$dir/pgbench.err" | sed 's/^/burst: /' >&2
  psql -X -qAt -c "SELECT count(mesh_release(run_id)) FROM mesh.workspaces
                    WHERE run_id LIKE 'burst-$prefix-%' AND status NOT IN ('released', 'failed')" >/dev/null
  rm -rf "$dir"
}

# burst_pct FILE P: the P-th percentile (0-1) of the samples in FILE, interpolated
burst_pct() {
  sort -g "$1" | awk -v p="$2" '{ v[NR] = $1 }
    END { if (NR == 0) { print "nan"; exit } x = (NR - 1) * p + 1; i = int(x); j = i + 1 > NR ? NR : i + 1
          printf "%.3f\n", v[i] + (x - i) * (v[j] - v[i]) }'
}

# burst_measure N SINGLES: sets BURST_SINGLE (median single cold start, ms), BURST_IDEAL,
# BURST_P50, BURST_P99, BURST_FAILURES and BURST_STAGES (the stage table, lines of: op stage
# calls total_ms ms_per_call %_of_total, with an "other" row for what the stages leave).
burst_measure() {
  local n=$1 singles=$2 i failures=0
  : > "$WORK/burst_single.ms"
  for i in $(seq 1 "$singles"); do
    sleep 0.2
    failures=$(( failures + $(burst_once 1 "single$i" "$WORK/burst_one.ms") ))
    cat "$WORK/burst_one.ms" >> "$WORK/burst_single.ms"
  done
  BURST_SINGLE=$(burst_pct "$WORK/burst_single.ms" 0.5)
  BURST_SINGLE_FAILURES=$failures
  BURST_IDEAL=$(awk -v n="$n" -v s="$BURST_SINGLE" -v c="$CORES" 'BEGIN { printf "%.3f", n * s / c }')
  sleep 1   # the standby holder back, the machine settled
  psql -X -qAt -c "SELECT mesh.call_stages_reset()" >/dev/null
  BURST_FAILURES=$(burst_once "$n" "n$n-$$" "$WORK/burst.ms")
  BURST_STAGES=$(psql -X -qAt -F' ' -c "
    WITH s AS (SELECT op, stage, calls, total_ms, n FROM mesh.call_stages() WITH ORDINALITY AS s(op, stage, calls, total_ms, n)
               WHERE calls > 0 AND op IN ('acquire', 'exec')),
         o AS (SELECT op, 'other' AS stage, max(calls) AS calls,
                      max(total_ms) FILTER (WHERE stage = 'total') - sum(total_ms) FILTER (WHERE stage <> 'total') AS total_ms,
                      max(n) - 0.5 AS n
               FROM s GROUP BY op)
    SELECT op, stage, calls, round(total_ms::numeric, 1), round((total_ms / calls)::numeric, 2),
           round((100 * total_ms / nullif(sum(total_ms) FILTER (WHERE stage = 'total') OVER (PARTITION BY op), 0))::numeric, 1)
    FROM (SELECT * FROM s UNION ALL SELECT * FROM o) x ORDER BY n")
  BURST_P50=$(burst_pct "$WORK/burst.ms" 0.5)
  BURST_P99=$(burst_pct "$WORK/burst.ms" 0.99)
}

# burst_summary: the figures, and the stage that took the largest share of a first exec
burst_summary() {
  printf 'burst of %d: time to first exec p50 %s ms, p99 %s ms, %d failures; single cold start %s ms (p50 of %d, %d failures); ideal (%d x single / %d cores) %s ms; p99 / ideal %s\n' \
    "$BURST_N" "$BURST_P50" "$BURST_P99" "$BURST_FAILURES" "$BURST_SINGLE" "$BURST_SINGLES" \
    "$BURST_SINGLE_FAILURES" "$BURST_N" "$CORES" "$BURST_IDEAL" \
    "$(awk -v p="$BURST_P99" -v i="$BURST_IDEAL" 'BEGIN { printf "%.2fx", p / i }')"
  # the stage (other than total) with the largest share of the exec's time
  awk '$1 == "exec" && $2 != "total" && $6 + 0 > best { best = $6 + 0; s = $2 }
    END {
      if (s == "") exit
      why["other"] = ": the caller'"'"'s set-up and the call'"'"'s wait behind other calls in its worker'"'"'s loop"
      why["http"] = ": the driver run (mesh-sandboxd creating the sandbox and running the command)"
      why["worker_txn"] = ": the worker'"'"'s own transactions and WAL flushes"
      why["handoff"] = ": the hand-off to the worker"
      why["reply"] = ": the reply'"'"'s trip back"
      printf "burst: the largest share of a first exec'"'"'s time is %s (%.1f%%)%s\n", s, best, why[s]
    }' <<<"$BURST_STAGES"
}

# burst_stage_table: stage by stage, where the burst's time went
burst_stage_table() {
  printf '%-10s %-10s %-14s %8s %12s %12s %8s\n' phase op stage calls total_ms ms_per_call "%_total"
  awk '{ printf "%-10s %-10s %-14s %8s %12s %12s %8s\n", "burst", $1, $2, $3, $4, $5, $6 }' <<<"$BURST_STAGES"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cd "$(dirname "$0")/.."
  BURST_N=${1:-100}
  BURST_SINGLES=${2:-10}
  CORES=$(nproc)
  . bench/lib.sh
  bench_cluster 2 "max_connections = $(( BURST_N + 20 ))"
  echo "bench/burst.sh: $BURST_N runs at once, $BURST_SINGLES single cold starts; $(lscpu | sed -n 's/^Model name: *//p'), $CORES cores;" \
       "load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  burst_measure "$BURST_N" "$BURST_SINGLES"
  burst_stage_table
  burst_summary
  echo "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
fi
