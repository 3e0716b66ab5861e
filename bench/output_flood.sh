#!/usr/bin/env bash
# bench/output_flood.sh: what a flood of output costs the database's disk, against what is kept.
#
#   sudo bench/output_flood.sh [SECONDS]
#
# One background command writes incompressible output (random bytes as base64) as fast as it
# can for SECONDS (default 30), with the default bounds; then a checkpoint.  Reported: the
# bytes kept (the stream's stored length, and mesh.exec_output's size on disk), the data
# directory's growth over the flood (pg_wal included; the workspaces' own filesystem and the
# daemon's state excluded) and their ratio (target: growth <= 2x what is kept).  The same for
# a foreground mesh_exec flood (its answer keeps the last mesh.exec_output_limit bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_FLOOD=${1:-30}
. bench/lib.sh
bench_cluster 2
data="$WORK/pg/data"
size_of_data() { du -sb --exclude=mesh_sandboxd --exclude=mesh_broker "$data" | cut -f1; }
flood="timeout $SECONDS_FLOOD sh -c 'head -c 100000000000 /dev/urandom | base64'"

psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-flood', 'bench', 'bench')" >/dev/null
psql -X -qAt -c "SELECT 1 FROM mesh_exec('bench-flood', ARRAY['true'])" >/dev/null
psql -X -qAt -c "CHECKPOINT" >/dev/null
wal_lsn() { psql -X -qAt -c "SELECT pg_current_wal_lsn()"; }
table_size() { psql -X -qAt -c "SELECT pg_total_relation_size('mesh.exec_output')"; }
report() {  # report WHAT EXEC_ID BEFORE TABLE_BEFORE LSN_BEFORE
  local after kept table wal
  psql -X -qAt -c "CHECKPOINT" >/dev/null
  after=$(size_of_data)
  kept=$(psql -X -qAt -c "SELECT stdout_bytes - stdout_dropped FROM mesh.execs WHERE id = $2")
  table=$(( $(table_size) - $4 ))
  wal=$(psql -X -qAt -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$5')")
  echo "$1: kept $kept bytes ($table on disk with TOAST and index); WAL written $wal bytes;" \
       "data directory grew $((after - $3)) bytes (pg_wal included)"
  echo "  growth / kept = $(echo "scale=2; ($after - $3) / $kept" | bc)x;" \
       "(on-disk kept + WAL) / on-disk kept = $(echo "scale=2; ($table + $wal) / $table" | bc)x;" \
       "stopped: $(psql -X -qAt -c "SELECT coalesce(output_stopped, 'no') || ', ' || output_unstored || ' bytes not stored' FROM mesh.execs WHERE id = $2")"
}

before=$(size_of_data); t0=$(table_size); l0=$(wal_lsn)
id=$(psql -X -qAt -c "SELECT mesh_exec_start('bench-flood', ARRAY['sh', '-c', \$\$$flood\$\$])")
psql -X -qAt -c "SELECT status FROM mesh_exec_wait($id)" >/dev/null 2>&1
report "background flood ${SECONDS_FLOOD}s" "$id" "$before" "$t0" "$l0"

before=$(size_of_data); t0=$(table_size); l0=$(wal_lsn)
id=$(psql -X -qAt -c "SELECT exec_id FROM mesh_exec('bench-flood', ARRAY['sh', '-c', \$\$$flood\$\$], timeout => '5min')" 2>/dev/null)
report "foreground flood ${SECONDS_FLOOD}s" "$id" "$before" "$t0" "$l0"
psql -X -qAt -c "SELECT mesh_release('bench-flood')" >/dev/null
