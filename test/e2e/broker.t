#!/usr/bin/env bash
# The credential broker, from inside real sandboxes: a run exchanges its token for a
# granted secret; anything else is refused and recorded; rotation, revocation and
# release cut a token off; the canary never reaches a log, a row or pg_stat_activity.
. "$(dirname "$0")/lib.sh"
plan 17
canary="CANARY-$RANDOM$RANDOM-broker"
q "SELECT mesh.secret_set('broker-agent', 'api_key', '$canary')" >/dev/null
q "SELECT mesh.secret_set('broker-agent', 'other_key', 'OTHER-$canary')" >/dev/null
q "SELECT mesh.environment_set('broker-env', '[{\"kind\": \"secret\", \"name\": \"api_key\"}]')" >/dev/null
q "SELECT 1 FROM mesh_acquire('brk-a', 'broker-agent', 'pat', environment => 'broker-env')" >/dev/null
q "SELECT 1 FROM mesh_acquire('brk-b', 'broker-agent', 'pat', environment => 'broker-env')" >/dev/null
q "SELECT 1 FROM mesh_acquire('brk-c', 'broker-agent', 'pat')" >/dev/null

# fetch NAME [TOKEN-EXPR]: what the broker answers a sandbox, from inside run $run
fetch() {
  local run=$1 name=$2 token=${3:-'$(cat /workspace/.mesh/run-token)'}
  q "SELECT stdout FROM mesh_exec('$run', ARRAY['sh', '-c',
      'curl -s --unix-socket /run/mesh/broker.sock -X POST -H \"Authorization: Bearer $token\" http://mesh/v1/secrets/$name'])"
}

got=$(fetch brk-a api_key)
echo "$got" | grep -q '"value":"\[redacted api_key\]"\|"value"' ; ok $? "a granted secret is handed over inside the sandbox"
echo "$got" | grep -q "$canary"; ok $((! $?)) "and its value does not come back out through mesh_exec"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'brk-a' AND kind = 'secret_read' AND detail->>'secret' = 'api_key'")" 1 \
   "the read is an event"
fetch brk-a other_key | grep -q '"refused"'; ok $? "a secret the run was not granted is refused"
is "$(q "SELECT detail->>'reason' FROM mesh.events WHERE run_id = 'brk-a' AND kind = 'secret_refused' ORDER BY id DESC LIMIT 1")" \
   "the run has no grant for this secret" "the refusal is an event with its reason"
fetch brk-b api_key 'nonsense-token' | grep -q '"unknown token"'; ok $? "a forged token is refused"
# another run's valid token, presented from this run's sandbox
tok_a=$(q "SELECT stdout FROM mesh_exec('brk-a', ARRAY['cat', '/workspace/.mesh/run-token'])" | tr -d '\n')
fetch brk-b api_key "$tok_a" | grep -q 'the token belongs to another workspace'
ok $? "another run's token is refused in this run's sandbox"
fetch brk-b api_key | grep -q '"value"'; ok $? "while this run's own token works"
# a run without grants has no token and no broker
is "$(q "SELECT stdout FROM mesh_exec('brk-c', ARRAY['sh', '-c', 'test -e /workspace/.mesh/run-token && echo token; test -S /run/mesh/broker.sock && echo broker; echo done'])")" done \
   "a run without grants gets no token and no broker socket"

# rotation: the old token is refused at once, the next call delivers a fresh one
old=$(q "SELECT stdout FROM mesh_exec('brk-a', ARRAY['cat', '/workspace/.mesh/run-token'])" | tr -d '\n')
q "SELECT mesh.secret_set('broker-agent', 'api_key', 'ROTATED-$canary')" >/dev/null
q "SELECT stdout FROM mesh_exec('brk-a', ARRAY['cp', '/workspace/.mesh/run-token', '/workspace/new-token'])" >/dev/null
fetch brk-a api_key "$old" | grep -q 'token revoked'; ok $? "after rotation the old token is refused"
fetch brk-a api_key | grep -q '"value"'; ok $? "the run's next call carries a fresh token that works"

# an expired token is refused (expiry is the run's longest lifetime: age this one, and ask
# the broker from the host side of brk-b's own socket, since a call would mint a fresh token)
tok_b=$(q "SELECT stdout FROM mesh_exec('brk-b', ARRAY['cat', '/workspace/.mesh/run-token'])" | tr -d '\n')
q "UPDATE mesh.run_tokens SET expires_at = now() - interval '1 second' WHERE run_id = 'brk-b' AND revoked_at IS NULL" >/dev/null
sock="$PGDIR/data/mesh_broker/$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'brk-b'")/broker.sock"
curl -s -m 5 --unix-socket "$sock" -X POST -H "Authorization: Bearer $tok_b" http://mesh/v1/secrets/api_key \
  | grep -q 'token expired'
ok $? "an expired token is refused"

# revocation of the grant: refused from then on
q "SELECT mesh.grant_revoke('brk-a', 'secret', 'api_key', 'test revocation')" >/dev/null
fetch brk-a api_key | grep -q 'grant revoked'; ok $? "a revoked grant is refused"

# release: the run's token dies with it
tok=$(q "SELECT stdout FROM mesh_exec('brk-a', ARRAY['cat', '/workspace/.mesh/run-token'])" | tr -d '\n')
q "SELECT mesh_release('brk-a')" >/dev/null
fetch brk-b api_key "$tok" | grep -q 'token revoked'; ok $? "a released run's token is refused"

# the canary never leaked
is "$(grep -c "$canary" "$PGDIR/server.log")" 0 "the secret is not in the server log"
is "$(q "SELECT count(*) FROM mesh.execs WHERE concat(stdout, stderr, error) LIKE '%$canary%'") $(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$canary%'")" \
   "0 0" "nor in exec rows or events"
is "$(q "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%$canary%' AND pid <> pg_backend_pid()")" 0 \
   "nor in pg_stat_activity"
q "SELECT mesh_release('brk-b'), mesh_release('brk-c')" >/dev/null
done_testing
