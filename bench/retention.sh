#!/usr/bin/env bash
# bench/retention.sh: does the expiry of history keep up with a million execs a day?
#
#   sudo bench/retention.sh [EXECS]
#
# A day's worth of history at 1M execs/day, all past mesh.exec_retention (14 days), is made
# directly in the tables: EXECS (default 1000000) finished execs in runs of 100, each with a
# chunk of stored output and an event, the runs released (their sandboxes destroyed).  Then the
# reaper's expiry (mesh.history_expire in batches of 5000 rows of each kind, each its own
# transaction, as src/reaper.c runs it) deletes it all, folding it into mesh.usage_daily.
# Reported: the time, execs expired per second against the 11.6/s that 1M execs a day needs
# (EXECS other than 1M: the scale of the day it stands for is printed), and whether the
# rollup counts every deleted exec once.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
RUNS=$(( (N + 99) / 100 ))
. bench/lib.sh
bench_cluster 2
echo "generating $N execs in $RUNS runs, with $N output chunks and $N events (a day at 1M execs/day x $(echo "scale=3; $N / 1000000" | bc))"
t0=$(date +%s%N)
psql -X -q <<SQL
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref,
                             release_outcome, compute_seconds, created_at, released_at)
SELECT 'bench-ret-' || g, 'bench-' || (g % 10), 'bench', 'released', 'local', 'ref-' || g, 'destroyed', 10,
       now() - interval '16 days' + g * (interval '1 day' / $RUNS), now() - interval '16 days' + (g + 1) * (interval '1 day' / $RUNS)
  FROM generate_series(1, $RUNS) g;
INSERT INTO mesh.execs (workspace_id, run_id, argv, dir, env_names, timeout_ms, status, exit_code, stdout, stderr,
                        stdout_bytes, wall_seconds, cpu_seconds, charged_seconds, charge_basis, started_at, finished_at)
SELECT w.id, w.run_id, ARRAY['bash', '-c', 'make test TARGET=' || g], '/workspace', ARRAY['PATH', 'HOME'], 300000,
       'ok', 0, 'hello from exec ' || g, '', 24, 0.1, 0.1, 0.1, 'cpu',
       w.created_at + (g % 100) * interval '1 ms', w.created_at + (g % 100 + 1) * interval '1 ms'
  FROM generate_series(1, $N) g JOIN mesh.workspaces w ON w.run_id = 'bench-ret-' || ((g - 1) / 100 + 1);
INSERT INTO mesh.exec_output (exec_id, stream, start_offset, data)
SELECT id, 'stdout', 0, convert_to('hello from exec ' || id || E'\n', 'UTF8') FROM mesh.execs
 WHERE run_id LIKE 'bench-ret-%';
INSERT INTO mesh.events (at, kind, run_id, workspace_id, backend, detail)
SELECT e.finished_at, 'file_written', e.run_id, e.workspace_id, 'local', jsonb_build_object('path', '/workspace/f' || e.id, 'bytes', 100)
  FROM mesh.execs e WHERE e.run_id LIKE 'bench-ret-%';
VACUUM ANALYZE mesh.workspaces;
VACUUM ANALYZE mesh.execs;
VACUUM ANALYZE mesh.exec_output;
VACUUM ANALYZE mesh.events;
SQL
echo "generated in $(( ($(date +%s%N) - t0) / 1000000 )) ms;" \
     "execs take $(psql -X -qAt -c "SELECT pg_size_pretty(pg_total_relation_size('mesh.execs'))")," \
     "events $(psql -X -qAt -c "SELECT pg_size_pretty(pg_total_relation_size('mesh.events'))")"

# the reaper's loop: one batch per transaction while any kind fills its batch
t0=$(date +%s%N); batches=0; execs=0; events=0; runs=0
while :; do
  read -r e v w < <(psql -X -qAt -F ' ' -c "SELECT execs, events, workspaces FROM mesh.history_expire(p_batch => 5000)")
  batches=$((batches + 1)); execs=$((execs + e)); events=$((events + v)); runs=$((runs + w))
  [ "$e" -ge 5000 ] || [ "$v" -ge 5000 ] || [ "$w" -ge 5000 ] || break
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
rate=$(( execs * 1000 / (ms + 1) ))
echo "expiry: $execs execs, $events events, $runs runs deleted in $ms ms, $batches batches of 5000:" \
     "$rate execs/s, $(echo "scale=0; $rate / 11.6" | bc)x the 11.6 execs/s of 1M execs a day"
echo "a day at 1M execs/day takes $(echo "scale=1; 1000000 / ($rate + 0.001)" | bc) s of expiry;" \
     "the reaper gives it up to a third of mesh.reaper_sweep_timeout ($(psql -X -qAt -c "SHOW mesh.reaper_sweep_timeout"))" \
     "every mesh.reaper_interval ($(psql -X -qAt -c "SHOW mesh.reaper_interval"))"
left=$(psql -X -qAt -c "SELECT (SELECT count(*) FROM mesh.execs WHERE run_id LIKE 'bench-ret-%') || ' execs, '
                              || (SELECT count(*) FROM mesh.exec_output) || ' chunks, '
                              || (SELECT count(*) FROM mesh.events WHERE kind = 'file_written') || ' events, '
                              || (SELECT count(*) FROM mesh.workspaces WHERE run_id LIKE 'bench-ret-%') || ' runs'")
echo "left: $left"
echo "rollup: $(psql -X -qAt -c "SELECT sum(execs) || ' execs, ' || sum(runs) || ' runs, ' || sum(compute_seconds) || ' compute seconds in '
                                        || count(*) || ' rows' FROM mesh.usage_daily WHERE agent_id LIKE 'bench-%'")" \
     "(made: $N execs, $RUNS runs, $((RUNS * 10)) compute seconds)"
