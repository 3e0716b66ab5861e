#!/usr/bin/env bash
# mesh.workers that do not fit in max_worker_processes: the server refuses to start
# and says which settings to change and to what, instead of running with a pool,
# reaper, broker or daemon supervisor silently missing.  A cluster of its own.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
plan 7
dir=$(mktemp -d /tmp/mesh-slots.XXXXXX); chmod 755 "$dir"
trap 'mesh_cluster_stop "$dir/pg"; rm -rf "$dir"' EXIT

# the default max_worker_processes (8) holds the logical replication launcher, and
# mesh's reaper, broker and supervisor: 8 pool workers need 12
(mesh_cluster_start "$dir/pg" "mesh.workers = 8") >/dev/null 2>&1
ok "$(! pg_ctl -D "$dir/pg/data" status >/dev/null 2>&1; echo $?)" "the server refuses to start with mesh.workers = 8 and max_worker_processes = 8"
log=$(grep -A2 'FATAL' "$dir/pg/server.log")
echo "$log" | sed 's/^/# /'
ok "$(echo "$log" | grep -q 'FATAL:  mesh_exec needs 12 background worker processes, but max_worker_processes is 8'; echo $?)" \
   "the error names max_worker_processes and the number needed"
ok "$(echo "$log" | grep -q 'DETAIL:  mesh.workers = 8 pool workers'; echo $?)" "the detail names mesh.workers"
ok "$(echo "$log" | grep -q 'HINT:  Set max_worker_processes to at least 12'; echo $?)" "the hint says what to set"

(mesh_cluster_start "$dir/pg" "mesh.workers = 8" "max_worker_processes = 12") >/dev/null 2>&1
export PGHOST=$dir/pg PGDATABASE=postgres
wait_for "SELECT count(*) = 8 FROM pg_stat_activity WHERE backend_type = 'mesh worker'" 300
ok $? "with max_worker_processes = 12 all 8 pool workers run"
is "$(q "SELECT string_agg(DISTINCT backend_type, ',' ORDER BY backend_type) FROM pg_stat_activity WHERE backend_type IN ('mesh reaper', 'mesh broker')")" \
   "mesh broker,mesh reaper" "and so do the reaper and the broker"
mesh_wait_embedded "$dir/pg" 2>/dev/null
ok $? "and the supervisor, whose embedded mesh-sandboxd answers"
done_testing
