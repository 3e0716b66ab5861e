#!/usr/bin/env bash
# The edge backend (src/backends/edge*.c) against the Fly.io Sprites API TEST DOUBLE
# (test/lib/edge.sh; its sprites are real mesh-sandboxd workspaces): the capabilities it
# declares, per-exec environment and working directory, the workspace's name as the sprite's,
# an egress policy that refuses uncontrolled backends refusing it before any sprite is created
# (with a positive control: "uncontrolled": "allow" creates one), a wrong token refused with an
# error naming the backend and never the token, the token in no log, event or exec row, and
# a config carrying credentials in its URL refused.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/edge.sh"
if [ -z "${MESH_EDGE_URL:-}" ]; then
  skip_all "${MESH_EDGE_URL_SKIP:-MESH_EDGE_URL is not set (test/run.sh starts the double)}"
fi
plan 12
tag="ed$$"
t=ed-$$
token=$(cat "$MESH_EDGE_TOKEN_FILE")
q "SELECT mesh.backend_add('$tag', 'edge', '{\"api_url\": \"$MESH_EDGE_URL\"}', catalog_order => 1000)" >/dev/null
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_EDGE_TOKEN_FILE'), E'\\n'))" >/dev/null
q "SELECT mesh.agent_set('$t-agent', backend => '$tag')" >/dev/null
trap 'q "DELETE FROM mesh.egress_settings" >/dev/null' EXIT
sprites() {
  curl -s -m 10 -H "Authorization: Bearer $token" "$MESH_EDGE_URL/v1/sprites" |
    python3 -c 'import json,sys;print(len(json.load(sys.stdin)["sprites"]))'
}
ws() { q "SELECT $2 FROM mesh.workspaces WHERE run_id = '$1'"; }

q "SELECT 1 FROM mesh_acquire('$t-1', '$t-agent', 'ann')" >/dev/null
is "$(q "SELECT stdout FROM mesh_exec('$t-1', ARRAY['sh', '-c', 'mkdir -p sub && echo made'])" 2>/dev/null)" made \
   "a first exec runs in a new sprite"
is "$(q "SELECT stdout FROM mesh_exec('$t-1', ARRAY['sh', '-c', 'pwd; echo \$GREETING'], env => '{\"GREETING\": \"hi there\"}', dir => 'sub')")" \
   "/workspace/sub"$'\n'"hi there" "each exec takes its own environment and working directory"
is "$(ws "$t-1" "(capabilities->>'hibernate') || '/' || (capabilities->>'caller_chosen_id') || '/' || (capabilities->>'egress_control') || '/' || (capabilities->>'snapshot')")" \
   "true/true/false/false" "capabilities recorded truthfully: hibernate, caller-chosen id; no egress control, no snapshots"
ref=$(ws "$t-1" external_ref)
is "$(curl -s -m 10 -H "Authorization: Bearer $token" "$MESH_EDGE_URL/v1/sprites/$ref" | python3 -c 'import json,sys;print(json.load(sys.stdin)["name"])')" \
   "$ref" "the workspace's reference is the sprite's name, chosen by the caller"

# egress: a policy refusing uncontrolled backends refuses this one before anything is created
q "SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\", \"domains\": [\"example.com\"], \"uncontrolled\": \"refuse\"}')" >/dev/null
before=$(sprites)
q "SELECT 1 FROM mesh_acquire('$t-2', '$t-agent', 'ann')" >/dev/null
like "$(q "SELECT exit_code FROM mesh_exec('$t-2', ARRAY['true'])" 2>&1)" "backend \"$tag\" cannot enforce the workspace egress allowlist" \
     "an allowlist policy with uncontrolled: refuse refuses the edge backend"
is "$(sprites)" "$before" "and no sprite was created"
q "SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\", \"domains\": [\"example.com\"], \"uncontrolled\": \"allow\"}')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$t-3', '$t-agent', 'ann')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('$t-3', ARRAY['true'])" 2>/dev/null)/$(sprites)" "0/$((before + 1))" \
   "positive control: with uncontrolled: allow the same agent gets a sprite"
q "DELETE FROM mesh.egress_settings" >/dev/null

# a wrong token: refused, the error names the backend, never a token
q "SELECT mesh.backend_set_credential('$tag', 'not-the-token-$$')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$t-4', '$t-agent', 'ann')" >/dev/null
err=$(q "SELECT exit_code FROM mesh_exec('$t-4', ARRAY['true'])" 2>&1)
like "$err" "backend \"$tag\" answered HTTP 401" "a wrong token is refused with the service's 401, naming the backend"
! grep -qE "not-the-token|$token" <<<"$err"; ok $? "and the error carries no token"
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_EDGE_TOKEN_FILE'), E'\\n'))" >/dev/null
is "$(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$token%' OR detail::text LIKE '%not-the-token-$$%'")/$(q "SELECT count(*) FROM mesh.execs WHERE argv::text LIKE '%$token%' OR coalesce(error, '') LIKE '%$token%'")" \
   "0/0" "no event or exec row holds a token"
grep -qF -e "$token" -e "not-the-token-$$" "$PGDIR/server.log" "$MESH_EDGE_DIR/double.log" 2>/dev/null
isnt_ok=$?; [ "$isnt_ok" -ne 0 ]; ok $? "neither token is in the server's log nor the double's"
like "$(q "SELECT mesh.backend_add('${tag}x', 'edge', '{\"api_url\": \"http://user:pw@127.0.0.1:1\"}')" 2>&1)" "api_url: must not carry credentials" \
     "a config with credentials in its URL is refused"
for r in 1 2 3 4; do q "SELECT mesh_release('$t-$r')" >/dev/null 2>&1; done
done_testing
