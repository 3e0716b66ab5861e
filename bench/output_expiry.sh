#!/usr/bin/env bash
# bench/output_expiry.sh: does the expiry of stored output keep up?
#
#   sudo bench/output_expiry.sh [EXECS]
#
# EXECS (default 1000000) finished execs, each with a chunk of stored output and its clamped
# copies, all past mesh.exec_output_retention, are made directly in the tables; then the
# reaper's expiry (mesh.exec_output_expire in batches of 5000, each its own transaction, as
# src/reaper.c runs it) clears them.  Reported: the time, the rate, and how that rate compares
# with 1M execs a day (11.6 execs/s), then what one mesh.sweep() clears within its share of
# mesh.reaper_sweep_timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
. bench/lib.sh
bench_cluster 2
psql -X -q <<SQL
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status)
SELECT 'bench-expiry-' || g, 'bench', 'bench', 'released' FROM generate_series(1, 100) g;
INSERT INTO mesh.execs (workspace_id, run_id, argv, timeout_ms, status, finished_at, stdout, stderr,
                        stdout_bytes)
SELECT w.id, w.run_id, ARRAY['echo'], 1000, 'ok', now() - interval '8 days' + g * interval '1 ms',
       'hello from exec ' || g, '', 24
  FROM generate_series(1, $N) g JOIN mesh.workspaces w ON w.run_id = 'bench-expiry-' || (g % 100 + 1);
INSERT INTO mesh.exec_output (exec_id, stream, start_offset, data)
SELECT id, 'stdout', 0, convert_to('hello from exec ' || id || E'\n', 'UTF8') FROM mesh.execs
 WHERE run_id LIKE 'bench-expiry-%';
VACUUM ANALYZE mesh.execs;
VACUUM ANALYZE mesh.exec_output;
SQL
before=$(psql -X -qAt -c "SELECT count(*) FROM mesh.exec_output")
t0=$(date +%s%N); batches=0
while [ "$(psql -X -qAt -c "SELECT mesh.exec_output_expire(10080, 5000)")" -eq 5000 ]; do batches=$((batches + 1)); done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
left=$(psql -X -qAt -c "SELECT count(*) FROM mesh.exec_output")
cleared=$(psql -X -qAt -c "SELECT count(*) FROM mesh.execs WHERE stdout IS NULL AND stdout_dropped = stdout_bytes")
echo "expiry: $cleared of $N execs cleared ($before chunks, $left left) in $ms ms, $((batches + 1)) batches:" \
     "$(( cleared * 1000 / (ms + 1) )) execs/s, $(echo "scale=0; $cleared * 1000 / ($ms + 1) / 11.6" | bc)x the 11.6/s of 1M execs a day"
# one sweep's share: the same again, through the reaper
psql -X -q -c "UPDATE mesh.execs SET stdout = 'again', stdout_dropped = 0 WHERE run_id LIKE 'bench-expiry-%'" >/dev/null
t0=$(date +%s%N)
swept=$(psql -X -qAt -c "SELECT detail FROM mesh.sweep() WHERE action = 'output_expired'")
echo "one mesh.sweep(): ${swept:-nothing expired} in $(( ($(date +%s%N) - t0) / 1000000 )) ms" \
     "(its expiry has a third of mesh.reaper_sweep_timeout, $(psql -X -qAt -c "SHOW mesh.reaper_sweep_timeout"))"
