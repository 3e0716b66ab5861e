#!/usr/bin/env bash
# Repository tokens through the broker (issue 31), from inside real sandboxes: a run granted
# one repository gets a token minted lazily by the broker at the GitHub API double
# (test/repos/github_double.py: JWT verified with the App's public key, scoping enforced),
# scoped to exactly that repository and the grant's permissions; another host, another
# repository or another run's token is refused; every fetch is an event; the token is never
# in an exec row, an event or the server log; a key rotation and a release revoke it at the
# provider, and the outcome is recorded.
. "$(dirname "$0")/lib.sh"
plan 18
work=$(mktemp -d /tmp/mesh-repo-broker.XXXXXX)
double_pid=
trap '[ -n "$double_pid" ] && kill "$double_pid" 2>/dev/null; rm -rf "$work"' EXIT
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/app.pem" 2>/dev/null
openssl pkey -in "$work/app.pem" -pubout -out "$work/app.pub" 2>/dev/null
python3 "$(dirname "$0")/../repos/github_double.py" "$work/port" 4242 "$work/app.pub" 77 octo widgets,gadgets &
double_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
api="http://127.0.0.1:$(cat "$work/port")"
double() { curl -s -m 5 "$api/_double/$1"; }

q "SELECT mesh.repository_provider_set('gh-test', 'github', 'github.com', '$api', '4242', '77')" >/dev/null
psql -X -qAt -v ON_ERROR_STOP=1 -v key="$(cat "$work/app.pem")" <<'SQL' >/dev/null
SELECT mesh.repository_provider_set_credential('gh-test', :'key');
SQL
q "SELECT mesh.repository_register('octo/widgets', 'gh-test'), mesh.repository_register('octo/gadgets', 'gh-test')" >/dev/null
q "SELECT 1 FROM mesh_acquire('rt-a', 'repo-agent', 'alice')" >/dev/null
q "SELECT 1 FROM mesh_acquire('rt-b', 'repo-agent', 'bob')" >/dev/null
q "SELECT mesh.repository_grant('rt-a', 'octo/widgets', '{\"contents\": \"write\"}')" >/dev/null
q "SELECT mesh.repository_grant('rt-b', 'octo/gadgets', '{\"contents\": \"read\"}')" >/dev/null

# fetch RUN HOST REPO [TOKEN-EXPR]: the broker's answer inside run RUN, the token replaced by its SHA-256
fetch() {
  local run=$1 host=$2 repo=$3 token=${4:-'$(cat /workspace/.mesh/run-token)'}
  q "SELECT stdout FROM mesh_exec('$run', ARRAY['sh', '-c',
      'a=\$(curl -s --unix-socket /run/mesh/broker.sock -X POST -H \"Authorization: Bearer $token\" http://mesh/v1/repositories/$host/$repo/token);
       p=\$(printf %s \"\$a\" | sed -n \"s/.*\\\"password\\\":\\\"\\([^\\\"]*\\)\\\".*/\\1/p\");
       if [ -n \"\$p\" ]; then printf %s \"\$p\" | sha256sum | cut -c1-64; else printf %s \"\$a\"; fi'])"
}
h1=$(fetch rt-a github.com octo/widgets)
like "$h1" '^[0-9a-f]{64}$' "a run granted a repository gets a token from the broker inside its sandbox"
is "$(double tokens | python3 -c "import json,sys; print(' '.join(f\"{t['repositories']}{t['permissions']}{t['live']}\" for t in json.load(sys.stdin) if t['sha256'] == '$h1'))")" \
   "['octo/widgets']{'contents': 'write'}True" "the double minted it for exactly that repository and the grant's permissions"
h2=$(fetch rt-a github.com octo/widgets)
is "$h2" "$h1" "a second fetch gets the same live token"
is "$(double counters | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["mints"], d["jwt_refused"])')" "1 0" \
   "minted once, lazily, and the double accepted the JWT"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'rt-a' AND kind = 'repository_token_read'")" 2 "every fetch is an event"
is "$(q "SELECT repository || ' ' || host || ' ' || actor_id || ' ' || live FROM mesh.run_repository_tokens('rt-a')")" \
   "octo/widgets github.com alice true" "what the run could see lists the token (repository, host, actor), never its value"
like "$(fetch rt-a github.example.com octo/widgets)" 'the grant does not name this host' "another host is refused"
like "$(fetch rt-a github.com octo/gadgets)" 'the run has no grant for this repository' "a repository the run was not granted is refused"
tok_b=$(q "SELECT stdout FROM mesh_exec('rt-b', ARRAY['cat', '/workspace/.mesh/run-token'])" | tr -d '\n')
like "$(fetch rt-a github.com octo/gadgets "$tok_b")" 'the token belongs to another workspace' "another run's run token is refused in this sandbox"
hb=$(fetch rt-b github.com octo/gadgets)
ok "$([ -n "$hb" ] && [ "$hb" != "$h1" ] && echo 0 || echo 1)" "the second run gets a token of its own, not the first run's"
value=$(q "SELECT token FROM mesh.repository_tokens WHERE run_id = 'rt-a' AND revoked_at IS NULL")
leaks=$(q "SELECT count(*) FROM mesh.execs WHERE stdout LIKE '%' || '$value' || '%' OR stderr LIKE '%' || '$value' || '%'")
leaks=$((leaks + $(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%' || '$value' || '%'")))
grep -rqF "$value" "$PGDIR"/*.log "$PGDIR"/data/log 2>/dev/null && leaks=$((leaks + 1))
ok "$([ -n "$value" ] && [ "$leaks" -eq 0 ] && echo 0 || echo 1)" "the token is in no exec row, event or server log"

# rotation of the App's key: the live tokens of the old key are refused at once and revoked at the provider
psql -X -qAt -v ON_ERROR_STOP=1 -v key="$(cat "$work/app.pem")" <<'SQL' >/dev/null
SELECT mesh.repository_provider_set_credential('gh-test', :'key');
SQL
is "$(q "SELECT count(*) FROM mesh.repository_tokens WHERE provider = 'gh-test' AND revoked_at IS NULL")" 0 "a key rotation invalidates every live token"
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(q "SELECT string_agg(DISTINCT revoke_outcome, ',') FROM mesh.repository_tokens WHERE provider = 'gh-test'")" revoked \
   "the broker revoked them at the provider and recorded its answer"
is "$(double tokens | python3 -c "import json,sys; print([t['live'] for t in json.load(sys.stdin) if t['sha256'] == '$h1'])")" \
   "[False]" "the provider refuses the revoked token"
h3=$(fetch rt-a github.com octo/widgets)
ok "$([ -n "$h3" ] && [ "$h3" != "$h1" ] && echo 0 || echo 1)" "after the rotation the next fetch mints a fresh token"

# release: the run's token is revoked at the provider
q "SELECT mesh_release('rt-a')" >/dev/null
is "$(q "SELECT revoke_outcome IS NOT NULL FROM mesh.repository_tokens WHERE run_id = 'rt-a' ORDER BY id DESC LIMIT 1")" t \
   "release ends the run's token"
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(double tokens | python3 -c "import json,sys; print([t['live'] for t in json.load(sys.stdin) if t['sha256'] == '$h3'])")" \
   "[False]" "release revoked it at the provider"
is "$(q "SELECT count(*) FROM mesh.repository_tokens WHERE run_id = 'rt-a' AND (token IS NOT NULL OR revoke_outcome <> 'revoked')")" 0 \
   "every token of the released run is revoked, its value wiped"
q "SELECT mesh_release('rt-b')" >/dev/null
