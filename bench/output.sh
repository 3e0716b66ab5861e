#!/usr/bin/env bash
# bench/output.sh: what storing every exec's output whole costs, measured in one run.
#
#   sudo bench/output.sh [ITERATIONS]
#
# 1. latency: mesh_exec of `echo hello` (a few bytes stored: one more transaction) vs
#    mesh_exec of `true` (nothing stored) in one warm workspace, medians, interleaved.
# 2. volume: 64 MB of stdout through mesh_exec (daemon, worker, store) vs the same bytes
#    through a local pipe, and the rate at which mesh_exec_output_bytes reads them back;
#    the worker's peak resident memory over that exec (root: it resets the peak).
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-200}
. bench/lib.sh
bench_cluster 2
psql -X -q <<SQL
SELECT 1 FROM mesh_acquire('bench-output', 'bench', 'bench') \g /dev/null
SELECT exit_code FROM mesh_exec('bench-output', ARRAY['true']) \gset
CREATE TEMP TABLE lat (what text, ms float8);
\\pset tuples_only on
\\pset format unaligned
\\pset fieldsep '\\n'
DO \$\$
DECLARE t0 timestamptz; rc int;
BEGIN
  FOR i IN 1..$ITER LOOP
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec('bench-output', ARRAY['true']);
    INSERT INTO lat VALUES ('true', extract(epoch FROM clock_timestamp() - t0) * 1000);
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec('bench-output', ARRAY['echo', 'hello']);
    INSERT INTO lat VALUES ('echo', extract(epoch FROM clock_timestamp() - t0) * 1000);
  END LOOP;
END \$\$;
SELECT format('latency   mesh_exec true (nothing stored):  %s ms (median of %s)',
              round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE what = 'true')::numeric, 3), $ITER),
       format('latency   mesh_exec echo hello (stored):  %s ms (median of %s)',
              round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE what = 'echo')::numeric, 3), $ITER),
       format('ratio     stored / nothing stored:       %sx',
              round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE what = 'echo')
                     / percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE what = 'true'))::numeric, 2))
  FROM lat;
SQL
t0=$(date +%s%N); head -c 67108864 /dev/urandom | cat > /dev/null; pipe=$(( ($(date +%s%N) - t0) / 1000000 ))
# the workers' peak resident memory over the 64 MB exec: reset (clear_refs 5), then VmHWM
workers=$(psql -X -qAt -c "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'mesh worker%'")
for p in $workers; do echo 5 > "/proc/$p/clear_refs"; done
t0=$(date +%s%N)
id=$(psql -X -qAt -c "SELECT exec_id FROM mesh_exec('bench-output', ARRAY['head', '-c', '67108864', '/dev/urandom'])")
stored=$(( ($(date +%s%N) - t0) / 1000000 ))
peak=0; shmem=0
for p in $workers; do
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$p/status")
  if [ "$hwm" -gt "$peak" ]; then peak=$hwm; shmem=$(awk '/^RssShmem/ {print $2}' "/proc/$p/status"); fi
done
t0=$(date +%s%N)
psql -X -qAt -c "SELECT sum(length(data)) FROM (SELECT data FROM mesh_exec_output_bytes($id, 'stdout', 0, 33554432)
                 UNION ALL SELECT data FROM mesh_exec_output_bytes($id, 'stdout', 33554432, 33554432)) p" >/dev/null
back=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "volume    64 MB through a local pipe:        ${pipe} ms"
echo "volume    64 MB through mesh_exec, stored:   ${stored} ms"
awk -v s="$stored" -v p="$pipe" 'BEGIN { printf "ratio     mesh_exec / pipe:              %.1fx\n", s / (p > 0 ? p : 1) }'
echo "volume    64 MB read back (two calls):       ${back} ms"
echo "memory    worker peak RSS over the 64 MB exec: $((peak / 1024)) MB ($((shmem / 1024)) MB of it shared memory it touched)"
psql -X -qAt -c "SELECT mesh_release('bench-output')" >/dev/null
