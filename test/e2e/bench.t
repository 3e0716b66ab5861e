#!/usr/bin/env bash
# bench/run.sh runs end to end with tiny iteration counts and a burst of 5 (a cluster of its
# own, next to the suite's) and prints every figure issues 14 and 29 ask for: each row with a
# numeric median, a numeric baseline, a ratio and its target; the load average; the burst's
# figures (every one of its runs got its first exec); the targets table, each row met or
# MISSED; and last, the per-stage breakdown of mesh.call_stages() for the burst, a warm exec
# and an acquire with its note, or, in a build without it, the line that says so.  Nothing
# here judges a timing.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
plan 24
out=$(mktemp)
MESH_PORT=$((PGPORT + 1)) PGOPTIONS= bash "$ROOT/bench/run.sh" 4 2 5 > "$out" 2>&1
ok $? "bench/run.sh 4 2 5 ran to the end"
sed 's/^/#   /' "$out" | tail -30

num='[0-9]+(\.[0-9]+)?'
# row_ok KEY: the row is there with, in order: unit, median, p99 (or -), the baseline's median
# and p99 (or -), the ratio
row_ok() {
  grep -qE "^$1 .* (ms|/s|/exec) +$num +($num|-) +.* $num +($num|-) +$num"x" " "$out"
}
for key in warm_exec warm_idle warm_stream sandboxd concurrent concurrent_lat acquire cold_start \
           burst cpu_per_exec cpu_workers fsync_per_exec flush_waits; do
  row_ok "$key"; ok $? "row $key: numeric median, baseline and ratio"
done
# four execs may take less CPU than one clock tick: then the row says it could not be computed
row_ok cpu_bound || grep -qE "^cpu_bound +\(too few execs for their CPU to be measured" "$out"
ok $? "row cpu_bound: numbers, or why there are none"
# the daemon's own CPU is measured in a cpuacct group of its own, which takes root
if [ "$(id -u)" -eq 0 ]; then
  row_ok cpu_bound_sd; ok $? "row cpu_bound_sd: numeric median, baseline and ratio"
else
  ok 0 "# SKIP cpu_bound_sd: mesh-sandboxd's own CPU is measured as root only"
fi
# a few execs may take less CPU than one clock tick: then CPU per exec is judged "unmeasured"
targets=$(grep -cE '^(warm_exec|sandboxd|cold_start) .*<= [0-9.]+x +(met|MISSED)$|^cpu_per_exec .*<= 1\.2x +(met|MISSED|unmeasured)$|^(warm_stream|burst) .*p99 <= [0-9.]+x +(met|MISSED)$|^concurrent .*>= 0\.7x +(met|MISSED)$|^acquire .*< 1 ms +(met|MISSED)$|^fsync_per_exec .*<= 0\.3 +(met|MISSED)$' "$out")
is "$targets" 9 "each figure with a target says whether it met it"
grep -qE "^burst of 5: time to first exec p50 $num ms, p99 $num ms, 0 failures; single cold start $num ms \(p50 of 3, 0 failures\); ideal \(5 x single / [0-9]+ cores\) $num ms" "$out"
ok $? "the burst of 5: p50, p99, the single cold start and the ideal, every run's first exec done"
# the targets table: a header, then one indented row per target, each a ratio and met/MISSED
rows=$(awk '/^targets: each a ratio/ { t = 1; next } t && /^$/ { exit } t' "$out" |
  grep -cE "^  .* $num +$num +(ms|/s|/exec) +${num}x  (<=|>=) ${num}x  (met|MISSED)$|^  CPU per warm exec .* unmeasured$")
is "$rows" 6 "the targets table: six rows, each a ratio to its baseline, met or MISSED"
grep -qE "^  burst of 5: p99 time to first exec / ideal .*(met|MISSED)$" "$out"
ok $? "the targets table has the burst's row"
grep -qE "^load average: $num $num $num at start, $num $num $num at end" "$out"
ok $? "the load average at start and end"

# the last table: a per-stage breakdown when this build has mesh.call_stages(), else one line
last=$(awk '/^phase +op +stage/ { t = 1 } t' "$out")
if [ "$(q "SELECT to_regprocedure('mesh.call_stages()') IS NOT NULL")" = t ]; then   # the same build
  echo "$last" | awk -v num="^$num\$" 'NR > 1 && $1 == "warm_exec" && $4 ~ num && $5 ~ num { e++ }
    NR > 1 && $1 == "acquire" && $4 ~ num && $5 ~ num { a++ } END { exit !(e > 0 && a > 0) }'
  ok $? "the last table breaks a warm exec and an acquire down by stage, with numbers"
  echo "$last" | awk -v num="^$num\$" '$1 == "burst" && $2 == "exec" && $3 == "http" && $4 == 5 && $5 ~ num { h++ }
    $1 == "burst" && $2 == "exec" && $3 == "other" { o++ } END { exit !(h == 1 && o == 1) }'
  ok $? "and the burst's five first execs, with what the stages leave (other)"
  # after the table's last row: a blank line and the note on what the stages count, to the end
  awk -v row="^acquire +[a-z_]+ +[a-z_]+ +$num +$num +$num +($num|-)$" '
    $0 ~ row { last = NR } { line[NR] = $0 }
    END { exit !(last > 0 && line[last + 1] == "" && line[last + 2] ~ /^The stages are disjoint/ &&
                 line[NR] ~ /worker.s loop\.$/) }' "$out"
  ok $? "the stage table comes last, followed only by its note"
else
  tail -1 "$out" | grep -q '^stages: mesh.call_stages() is not in this build'
  ok $? "without mesh.call_stages() the last line says so"
  ok 0 "# SKIP no mesh.call_stages() in this build"
  ok 0 "# SKIP no mesh.call_stages() in this build"
fi
rm -f "$out"
done_testing
