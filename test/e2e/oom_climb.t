#!/usr/bin/env bash
# A real out-of-memory kill on the README's path (the embedded mesh-sandboxd, set up by
# mesh-sandboxd --setup-host so the tiers' memory limits hold): a memory hog in a "small"
# workspace (512 MiB) is recorded oom with the workspace's peak memory, not ok; its run
# raises the agent's tier once, however many of its commands run out of memory; the
# agent's next run is acquired one tier up, and the climb is an event, a NOTICE and a row
# of mesh.tier_climbs.  A lock on the agent's row costs the climb, never the exec's record.
. "$(dirname "$0")/lib.sh"
plan 16
SOCK="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
q "SELECT mesh.agent_set('hog', 'local', default_size => 'small')" >/dev/null
hog="ARRAY['python3', '-c', E'b = []\nwhile True: b.append(bytearray(64 << 20))']"
MiB=1048576

q "SELECT 1 FROM mesh_acquire('oom-1', 'hog', 'olga')" >/dev/null
is "$(q "SELECT status FROM mesh_exec('oom-1', ARRAY['true'])" 2>/dev/null)" ok "a small workspace on the embedded daemon"
is "$(q "SELECT size || '/' || (capabilities->>'resource_limits') FROM mesh.workspaces WHERE run_id = 'oom-1'")" "small/true" \
   "whose memory limit is enforced"
is "$(q "SELECT memory_peak_bytes > 0 AND memory_peak_bytes < 64 * $MiB FROM mesh.exec_log WHERE run_id = 'oom-1'")" t \
   "an exec records the workspace's peak memory"
is "$(q "SELECT status || '/' || exit_code FROM mesh_exec('oom-1', $hog, timeout => '60 seconds')" 2>"$PGDIR/oom-notice")" "oom/137" \
   "a memory hog killed by the kernel comes back oom, exit 137"
grep -q 'ran out of memory in the workspace of run "oom-1"; agent "hog" climbs from tier "small" to "standard"' "$PGDIR/oom-notice"
ok $? "the caller is told, with a NOTICE, what that did to the agent's tier"
is "$(q "SELECT status || ' ' || (memory_peak_bytes > 256 * $MiB AND memory_peak_bytes <= 512 * $MiB)
         FROM mesh.exec_log WHERE run_id = 'oom-1' ORDER BY exec_id DESC LIMIT 1")" "oom true" \
   "the exec row says oom, with a peak near the tier's 512 MiB"
is "$(q "SELECT stdout FROM mesh_exec('oom-1', ARRAY['echo', 'alive'])")" alive "the workspace works on after the kill"
q "SELECT status FROM mesh_exec('oom-1', $hog, timeout => '60 seconds')" >/dev/null 2>&1
is "$(q "SELECT string_agg(status::text, ',' ORDER BY id) FROM mesh.execs WHERE run_id = 'oom-1'")" "ok,oom,ok,oom" \
   "a second hog in the same run is oom too"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'oom-1' AND kind = 'tier_climb'")" 1 \
   "the run climbs once, not once per oom exec"
is "$(q "SELECT change || ':' || from_size || '->' || to_size || ' now ' || climbed_size_now FROM mesh.tier_climbs WHERE agent_id = 'hog'")" \
   "climb:small->standard now standard" "mesh.tier_climbs shows the climb and the tier in force"
is "$(q "SELECT exec_id = (SELECT id FROM mesh.execs WHERE run_id = 'oom-1' AND status = 'oom' ORDER BY id LIMIT 1) FROM mesh.tier_climbs WHERE run_id = 'oom-1'")" t \
   "naming the exec that ran out of memory"

q "SELECT 1 FROM mesh_acquire('oom-2', 'hog', 'olga')" >/dev/null
q "SELECT exit_code FROM mesh_exec('oom-2', ARRAY['true'])" >/dev/null 2>&1
is "$(q "SELECT size FROM mesh.workspaces WHERE run_id = 'oom-2'")" standard "the agent's next run is acquired one tier up"
ref=$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'oom-2'")
is "$(curl -sf -m 5 --unix-socket "$SOCK" "http://localhost/v1/workspaces/$ref" | jq -r .size)" standard \
   "and the backend was asked for that tier"

# the climb is bookkeeping on the agent's row, in its own transaction: a caller holding a
# lock on that row loses no record of what ran, only the climb, and is told so
q "SELECT mesh.agent_set('hog-2', 'local', default_size => 'small')" >/dev/null
q "SELECT 1 FROM mesh_acquire('oom-3', 'hog-2', 'olga')" >/dev/null
q "SELECT exit_code FROM mesh_exec('oom-3', ARRAY['true'])" >/dev/null 2>&1
got=$(psql -X -qAt 2>"$PGDIR/oom-locked" <<SQL
BEGIN;
SELECT 1 FROM mesh.agents WHERE agent_id = 'hog-2' FOR UPDATE;
SELECT status FROM mesh_exec('oom-3', $hog, timeout => '60 seconds');
COMMIT;
SQL
)
is "$(echo "$got" | tail -1)" oom "an oom exec in a transaction that locks its agent's row still returns oom"
grep -q "tier climb could not be recorded" "$PGDIR/oom-locked"; ok $? "and the caller is told the climb was not recorded"
is "$(q "SELECT string_agg(status::text, ',' ORDER BY id) FROM mesh.execs WHERE run_id = 'oom-3'")/$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'oom-3' AND kind = 'tier_climb'")" \
   "ok,oom/0" "the exec row is recorded all the same"
q "SELECT mesh_release('oom-1'), mesh_release('oom-2'), mesh_release('oom-3')" >/dev/null
done_testing
