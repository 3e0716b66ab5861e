#!/usr/bin/env bash
# A real out-of-memory kill, through the whole path: a memory hog in a "small" workspace
# (512 MiB) of a mesh-sandboxd that has the memory controller (run as root here) is
# recorded oom, not ok; its run raises the agent's tier once, however many of its commands
# run out of memory; the agent's next run is acquired one tier up, and the climb is an
# event and a row of mesh.tier_climbs.  A lock on the agent's row costs the climb, never
# the exec's record.
. "$(dirname "$0")/lib.sh"
plan 14
remote_daemon_start
q "SELECT mesh.backend_add('oomhost', 'sandboxd', '{\"url\": \"http://127.0.0.1:$RD_PORT\"}', catalog_order => 20)" >/dev/null
q "SELECT mesh.backend_set_credential('oomhost', trim(pg_read_file('$RD_DIR/token.pg'), E'\n'))" >/dev/null
q "SELECT mesh.agent_set('hog', 'oomhost', default_size => 'small')" >/dev/null
hog="ARRAY['python3', '-c', E'b = []\nwhile True: b.append(bytearray(64 << 20))']"

q "SELECT 1 FROM mesh_acquire('oom-1', 'hog', 'olga')" >/dev/null
is "$(q "SELECT status || '/' || exit_code FROM mesh_exec('oom-1', $hog, timeout => '60 seconds')" 2>"$RD_DIR/notice")" "oom/137" \
   "a memory hog killed by the kernel comes back oom, exit 137"
grep -q 'ran out of memory in the workspace of run "oom-1"; agent "hog" climbs from tier "small" to "standard"' "$RD_DIR/notice"
ok $? "the caller is told, with a NOTICE, what that did to the agent's tier"
is "$(q "SELECT size || '/' || (capabilities->>'resource_limits') FROM mesh.workspaces WHERE run_id = 'oom-1'")" "small/true" \
   "in a small workspace whose limits are enforced"
is "$(q "SELECT status FROM mesh.execs WHERE run_id = 'oom-1'")" oom "the exec row says oom"
is "$(q "SELECT stdout FROM mesh_exec('oom-1', ARRAY['echo', 'alive'])")" alive "the workspace works on after the kill"
q "SELECT status FROM mesh_exec('oom-1', $hog, timeout => '60 seconds')" >/dev/null 2>&1
is "$(q "SELECT string_agg(status::text, ',' ORDER BY id) FROM mesh.execs WHERE run_id = 'oom-1'")" "oom,ok,oom" \
   "a second hog in the same run is oom too"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'oom-1' AND kind = 'tier_climb'")" 1 \
   "the run climbs once, not once per oom exec"
is "$(q "SELECT change || ':' || from_size || '->' || to_size || ' now ' || climbed_size_now FROM mesh.tier_climbs WHERE agent_id = 'hog'")" \
   "climb:small->standard now standard" "mesh.tier_climbs shows the climb and the tier in force"
is "$(q "SELECT exec_id = (SELECT min(id) FROM mesh.execs WHERE run_id = 'oom-1') FROM mesh.tier_climbs WHERE run_id = 'oom-1'")" t \
   "naming the exec that ran out of memory"

q "SELECT 1 FROM mesh_acquire('oom-2', 'hog', 'olga')" >/dev/null
q "SELECT exit_code FROM mesh_exec('oom-2', ARRAY['true'])" >/dev/null
is "$(q "SELECT size FROM mesh.workspaces WHERE run_id = 'oom-2'")" standard "the agent's next run is acquired one tier up"
ref=$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'oom-2'")
is "$(rd_api GET "/v1/workspaces/$ref" | python3 -c 'import json,sys;print(json.load(sys.stdin)["size"])')" standard \
   "and the backend was asked for that tier"
# the climb is bookkeeping on the agent's row, in its own transaction: a caller holding a
# lock on that row loses no record of what ran, only the climb, and is told so
q "SELECT mesh.agent_set('hog-2', 'oomhost', default_size => 'small')" >/dev/null
q "SELECT 1 FROM mesh_acquire('oom-3', 'hog-2', 'olga')" >/dev/null
q "SELECT exit_code FROM mesh_exec('oom-3', ARRAY['true'])" >/dev/null
got=$(psql -X -qAt 2>"$RD_DIR/locked" <<SQL
BEGIN;
SELECT 1 FROM mesh.agents WHERE agent_id = 'hog-2' FOR UPDATE;
SELECT status FROM mesh_exec('oom-3', $hog, timeout => '60 seconds');
COMMIT;
SQL
)
is "$(echo "$got" | tail -1)" oom "an oom exec in a transaction that locks its agent's row still returns oom"
grep -q "tier climb could not be recorded" "$RD_DIR/locked"; ok $? "and the caller is told the climb was not recorded"
is "$(q "SELECT string_agg(status::text, ',' ORDER BY id) FROM mesh.execs WHERE run_id = 'oom-3'")/$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'oom-3' AND kind = 'tier_climb'")" \
   "ok,oom/0" "the exec row is recorded all the same"
q "SELECT mesh_release('oom-1'), mesh_release('oom-2'), mesh_release('oom-3')" >/dev/null
q "SELECT mesh.backend_disable('oomhost')" >/dev/null
done_testing
