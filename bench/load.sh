#!/usr/bin/env bash
# bench/load.sh: whole harness turns under concurrency, against the machine's bare
# fork+exec rate measured in the same run.
#
#   sudo bench/load.sh [SECONDS]
#
# A turn (test/lib/turn.pgbench, test/lib/turns.py) acquires a fresh run, writes a
# file, runs three commands, reads the file back and releases the run: 7 mesh calls,
# one cold sandbox.  For 1, 4, 8 and 16 clients it prints
#   - turns per second under pgbench (libpq, prepared statements),
#   - per-call p50/p99 latency in ms as a psycopg2 client saw it (acquire, write:
#     materializes the sandbox, exec, read, release),
#   - the bare fork+exec+wait rate of as many processes (bench/forkexec.c),
# and the turn rate as commands per second (3 per turn) against that rate.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-15}
. bench/lib.sh
bench_cluster 2
mkdir -p bench/out
cc -O2 -o bench/out/forkexec bench/forkexec.c
psql -X -q -f test/lib/turn.sql
export PGOPTIONS="-c client_min_messages=warning"

printf '%-8s %-9s %-9s %-12s %-7s %s\n' clients "turns/s" "execs/s" "fork+exec/s" errors "per call p50/p99 ms (psycopg2)"
for c in 1 4 8 16; do
  # a client that meets an error stops; the errors column counts them (pgbench, psycopg2)
  pgbench -n -M extended -f test/lib/turn.pgbench -D agent="bench-$c" -c "$c" -j "$c" -T "$SECONDS_EACH" \
    > "$WORK/pgbench.out" 2> "$WORK/pgbench.err" || true
  tps=$(awk '/^tps/ {print $3; exit}' "$WORK/pgbench.out")
  /usr/bin/python3 test/lib/turns.py "$c" "$SECONDS_EACH" "bench-py-$c" > "$WORK/driver.json" || true
  read -r lat py_errors < <(/usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%s %.1f/%.1f" % (k, v["p50"], v["p99"]) for k, v in d["latency_ms"].items()).replace(" ", "_"), d["errors"])' "$WORK/driver.json")
  errors=$(( $(grep -c 'aborted in command' "$WORK/pgbench.err" || true) + py_errors ))
  raw=$(bench/out/forkexec 300 "$c" | awk '{print $4}')
  printf '%-8s %-9.1f %-9.1f %-12.1f %-7s %s\n' "$c" "${tps:-0}" "$(awk -v t="${tps:-0}" 'BEGIN {print t * 3}')" \
    "$raw" "$errors" "${lat//_/ }"
done
echo "execs/s: the three commands of each turn; fork+exec/s: as many processes, bare, no sandbox"
