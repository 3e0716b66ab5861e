#!/usr/bin/env bash
# mesh_exec_extend on the embedded daemon: a background command and a foreground one (running
# in another session) outlive their first deadline once extended, and a command is still ended
# at its new deadline; the row (mesh.execs.timeout_ms) and an exec_extended event record who
# and by how much; every refusal has its SQLSTATE and a hint, and comes before any backend
# call; another role cannot extend a run's command.  Margins are seconds, never milliseconds.
. "$(dirname "$0")/lib.sh"
plan 31
run=ext-$$
rb=ext_b_$$
short=ext-short-$$
sock="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
q "CREATE ROLE $rb LOGIN IN ROLE mesh_harness" >/dev/null

# err SQL [psql args] -> "SQLSTATE: message HINT: hint" of the error SQL raised
err() { psql -X -qAt -v VERBOSITY=verbose "${@:2}" -c "$1" 2>&1 | grep -E '^(ERROR|HINT)' | sed 's/^ERROR: *//' | tr '\n' ' '; }
cleanup() {
  q "SELECT mesh_release('$run')" >/dev/null 2>&1
  q "SELECT mesh_release('$run-fg')" >/dev/null 2>&1
  q "SELECT mesh_release('$run-b')" >/dev/null 2>&1
  q "DELETE FROM mesh.agents WHERE agent_id = '$short-agent'" >/dev/null 2>&1
  q "SELECT mesh.backend_disable('$short')" >/dev/null 2>&1
  q "DROP ROLE IF EXISTS $rb" >/dev/null 2>&1
}
trap cleanup EXIT

q "SELECT 1 FROM mesh_acquire('$run', 'ext-agent', 'eve')" >/dev/null

# 1. a background command outlives its first deadline
id=$(q "SELECT mesh_exec_start('$run', ARRAY['sh', '-c', 'sleep 4; echo done'], timeout => '2 seconds')")
deadline=$(q "SELECT mesh_exec_extend($id, '30 seconds')")
ok $? "mesh_exec_extend of a running background command answers its new deadline ($deadline)"
is "$(q "SELECT timeout_ms || ' ' || (started_at + interval '32 seconds' = '$deadline'::timestamptz) FROM mesh.execs WHERE id = $id")" \
   "32000 true" "its row's timeout is the first plus the extension, the deadline its start plus that"
is "$(q "SELECT status || ' ' || stdout FROM mesh_exec_wait($id, '60 seconds')")" "ok done" \
   "it ran past its first 2 s to its own end"
is "$(q "SELECT detail->>'by_ms' || ' ' || (detail->>'timeout_ms') || ' ' || (detail->>'by_role') || ' ' || backend
           FROM mesh.events WHERE kind = 'exec_extended' AND (detail->>'exec_id')::bigint = $id")" \
   "30000 32000 $(q "SELECT current_user") local" "an exec_extended event says by how much, the new timeout and who"

# 2. a command is still ended at its new deadline
id2=$(q "SELECT mesh_exec_start('$run', ARRAY['sleep', '600'], timeout => '1 second')")
q "SELECT mesh_exec_extend($id2, '3 seconds')" >/dev/null
is "$(q "SELECT status FROM mesh_exec_wait($id2, '120 seconds')")" timeout "it times out at the new deadline"
is "$(q "SELECT timeout_ms || ' ' || (finished_at - started_at >= interval '3.5 seconds') || ' ' || (finished_at - started_at < interval '100 seconds') FROM mesh.execs WHERE id = $id2")" \
   "4000 true true" "after its extended 4 s, not its first 1 s, long before its own 600 s"

# 3. a foreground command running in another session, on a backend whose own request deadline
#    (1 s plus the command's timeout) would end the call before the command without the extension
q "SELECT mesh.backend_add('$short', 'sandboxd', '{\"socket\": \"$sock\", \"request_timeout_ms\": 1000}', catalog_order => 900)" >/dev/null
q "SELECT mesh.agent_set('$short-agent', backend => '$short')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$run-fg', '$short-agent', 'eve')" >/dev/null
q "SELECT 1 FROM mesh_exec('$run-fg', ARRAY['true'])" >/dev/null
psql -X -qAt -c "SELECT status || ' ' || stdout FROM mesh_exec('$run-fg', ARRAY['sh', '-c', 'sleep 6; echo fg'], timeout => '2 seconds')" \
  > "$PGDIR/ext-fg.out" 2>&1 &
fg=$!
wait_for "SELECT count(*) = 1 FROM mesh.execs WHERE run_id = '$run-fg' AND status = 'running'" 300
fid=$(q "SELECT id FROM mesh.execs WHERE run_id = '$run-fg' AND status = 'running'")
q "SELECT mesh_exec_extend($fid, '30 seconds')" >/dev/null
ok $? "another session extends the foreground command ($fid)"
wait $fg
is "$(cat "$PGDIR/ext-fg.out")" "ok fg" "the caller gets the command's own end, past its first deadline and its request's"
is "$(q "SELECT timeout_ms FROM mesh.execs WHERE id = $fid")" 32000 "its row records the new timeout"

# a command may not be extended past its run's lifetime bound (mesh.settings.max_run_lifetime,
# 24 hours from the run's creation) until mesh_extend moves that bound
lid=$(q "SELECT mesh_exec_start('$run-fg', ARRAY['sleep', '600'], timeout => '10 minutes')")
e=$(err "SELECT mesh_exec_extend($lid, '2 days')")
[[ "$e" == "53400: exec $lid would run past its run's lifetime bound"*"HINT:"*"mesh_extend"* ]]
ok $? "past the run's lifetime bound: 53400, the hint naming mesh_extend ($e)"
q "SELECT mesh_extend('$run-fg', '3 days')" >/dev/null
is "$(q "SELECT mesh_exec_extend($lid, '2 days') IS NOT NULL")/$(q "SELECT timeout_ms FROM mesh.execs WHERE id = $lid")" \
   "t/173400000" "once mesh_extend moved the run's bound, the command is extended"
is "$(q "SELECT mesh_exec_kill($lid, 'KILL')")" t "it is ended by hand"

# 4. refusals, each before any backend call
e=$(err "SELECT mesh_exec_extend(-1, '1 minute')")
[[ "$e" == "42704: exec -1 does not exist"* ]]; ok $? "an unknown exec: 42704 ($e)"
e=$(err "SELECT mesh_exec_extend($id, '1 minute')")
[[ "$e" == "55000: exec $id is not running (ok)"*"HINT:"* ]]; ok $? "an ended exec: 55000 with a hint ($e)"
e=$(err "SELECT mesh_exec_extend(NULL, '1 minute')")
[[ "$e" == "22004: "*exec_id* ]]; ok $? "a NULL exec_id: 22004 ($e)"
e=$(err "SELECT mesh_exec_extend($id, NULL)")
[[ "$e" == "22004: "*by* ]]; ok $? "a NULL by: 22004 ($e)"
id3=$(q "SELECT mesh_exec_start('$run', ARRAY['sleep', '600'], timeout => '6 days')")
e=$(err "SELECT mesh_exec_extend($id3, '0 seconds')")
[[ "$e" == "22023: by must be positive"* ]]; ok $? "by 0: 22023 ($e)"
e=$(err "SELECT mesh_exec_extend($id3, '-5 seconds')")
[[ "$e" == "22023: by must be positive"* ]]; ok $? "a negative by: 22023 ($e)"
e=$(err "SELECT mesh_exec_extend($id3, '8 days')")
[[ "$e" == "22023: by must be at most 7 days"* ]]; ok $? "an absurd by: 22023 ($e)"
e=$(err "SELECT mesh_exec_extend($id3, '2 days')")
[[ "$e" == "53400: exec $id3 would have a timeout of 691200 seconds, over the 7 days"*"HINT:"* ]]
ok $? "past the longest timeout a command may have: 53400 ($e)"
is "$(q "SELECT timeout_ms FROM mesh.execs WHERE id = $id3")" 518400000 "and its timeout stays"
q "SELECT mesh.run_set_budget('$run', max_compute_seconds => 1000)" >/dev/null
e=$(err "SELECT mesh_exec_extend($id3, '1 second')")
[[ "$e" == "53400: "*"past the run's compute budget"*"HINT:"*"mesh.run_set_budget"* ]]
ok $? "past the run's compute budget: 53400 naming how to raise it ($e)"
# another role may not touch the command, as if it did not exist
e=$(err "SELECT mesh_exec_extend($id3, '1 minute')" -U "$rb")
[[ "$e" == "42704: exec $id3 does not exist"* ]]; ok $? "another role: 42704, as for an unknown exec ($e)"
is "$(q "SELECT count(*) FROM mesh.events WHERE kind = 'exec_extended' AND (detail->>'exec_id')::bigint = $id3")" 0 \
   "no refusal is recorded as an extension"
# a workspace whose backend does not declare extend_timeout (a row from before it, say)
q "UPDATE mesh.workspaces SET capabilities = capabilities - 'extend_timeout' WHERE run_id = '$run'" >/dev/null
e=$(err "SELECT mesh_exec_extend($id3, '1 minute')")
[[ "$e" == "0A000: "*"does not declare the extend_timeout capability"*"HINT:"*extend_timeout* ]]
ok $? "a backend without extend_timeout: 0A000, the hint naming the capability ($e)"
is "$(q "SELECT timeout_ms FROM mesh.execs WHERE id = $id3")" 518400000 "its timeout stays"
q "UPDATE mesh.workspaces SET capabilities = capabilities || '{\"extend_timeout\": true}' WHERE run_id = '$run'" >/dev/null
is "$(q "SELECT mesh_exec_kill($id3, 'KILL')")" t "the command is ended by hand"
is "$(q "SELECT capabilities->>'extend_timeout' FROM mesh.backend_catalog WHERE name = 'local'")" true \
   "the catalog shows the embedded daemon declares extend_timeout"
# 5. the kubernetes backend (its pods run mesh-sandboxd, whose extend call the driver proxies)
if [ -n "${MESH_K8S_URL:-}" ]; then
  . "$(dirname "$0")/../lib/kubernetes.sh"
  kt=kx$$
  q "SELECT mesh.backend_add('$kt', 'kubernetes', '$MESH_K8S_CONFIG', catalog_order => 1000)" >/dev/null
  q "SELECT mesh.backend_set_credential('$kt', trim(pg_read_file('$MESH_K8S_TOKEN_FILE'), E'\\n'))" >/dev/null
  q "SELECT mesh.agent_set('$kt-a', backend => '$kt')" >/dev/null
  q "SELECT 1 FROM mesh_acquire('$run-k', '$kt-a', 'eve')" >/dev/null
  q "SELECT 1 FROM mesh_exec('$run-k', ARRAY['true'])" >/dev/null 2>&1
  is "$(q "SELECT capabilities->>'extend_timeout' FROM mesh.workspaces WHERE run_id = '$run-k'")" true \
     "a kubernetes workspace records extend_timeout as its pod's daemon reports it"
  kid=$(q "SELECT mesh_exec_start('$run-k', ARRAY['sh', '-c', 'sleep 4; echo pod'], timeout => '2 seconds')")
  q "SELECT mesh_exec_extend($kid, '30 seconds')" >/dev/null
  ok $? "its background command is extended"
  is "$(q "SELECT status || ' ' || stdout FROM mesh_exec_wait($kid, '60 seconds')")" "ok pod" \
     "and runs past its first deadline to its own end"
  q "SELECT mesh_release('$run-k')" >/dev/null 2>&1
  q "SELECT mesh.backend_disable('$kt')" >/dev/null 2>&1
else
  skip "${MESH_K8S_URL_SKIP:-MESH_K8S_URL is not set (test/run.sh starts the double)}" 3
fi
done_testing
