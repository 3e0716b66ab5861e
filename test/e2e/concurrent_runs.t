#!/usr/bin/env bash
# One workspace per run under concurrent sessions; runs never share a workspace.
. "$(dirname "$0")/lib.sh"
plan 9
out=$(mktemp -d)

# two sessions declare the same run and exec in it at the same moment
q "SELECT 1 FROM mesh_acquire('conc-1', 'agent-c', 'alice')" >/dev/null
for i in 1 2 3; do
  psql -X -qAt -c "SELECT stdout FROM mesh_exec('conc-1', ARRAY['sh','-c','echo session-$i'])" \
    > "$out/s$i.out" 2> "$out/s$i.err" &
done
wait
got=$(cat "$out"/s*.out | grep -v '^$' | sort | tr '\n' ' ')
is "$got" "session-1 session-2 session-3 " "three concurrent first calls of one run all succeed"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE run_id = 'conc-1'")" 1 "one workspace row for the run"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'conc-1' AND kind = 'acquiring'")" 1 "materialized exactly once"
is "$(cat "$out"/s*.err | grep -c 'setting up a sandbox')" 1 "the set-up notice is given once"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = 'conc-1' AND status = 'ok'")" 3 "every exec is a row"

# two runs of one agent, concurrently: separate workspaces that cannot see each other
q "SELECT 1 FROM mesh_acquire('conc-a', 'agent-c', 'bob')" >/dev/null
q "SELECT 1 FROM mesh_acquire('conc-b', 'agent-c', 'bob')" >/dev/null
psql -X -qAt -c "SELECT exit_code FROM mesh_exec('conc-a', ARRAY['sh','-c','echo A > owner.txt'])" >/dev/null &
psql -X -qAt -c "SELECT exit_code FROM mesh_exec('conc-b', ARRAY['sh','-c','echo B > owner.txt'])" >/dev/null &
wait
is "$(q "SELECT stdout FROM mesh_exec('conc-a', ARRAY['cat', 'owner.txt'])")" A "run a sees only its own file"
is "$(q "SELECT stdout FROM mesh_exec('conc-b', ARRAY['cat', 'owner.txt'])")" B "run b sees only its own file"
is "$(q "SELECT count(DISTINCT external_ref) FROM mesh.workspaces WHERE run_id IN ('conc-a','conc-b')")" 2 \
   "two runs, two workspaces"
q "SELECT mesh_release('conc-1'), mesh_release('conc-a'), mesh_release('conc-b')" >/dev/null
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE run_id IN ('conc-1','conc-a','conc-b') AND status = 'released'")" 3 \
   "all released"
rm -rf "$out"
done_testing
