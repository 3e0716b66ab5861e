#!/usr/bin/env bash
# mesh_checkout (issue 31, second half): a harness checks out a repository in three SQL calls;
# real git inside real sandboxes reaches a real git smart-HTTP server (test/repos/git_server.py:
# `git http-backend`, every request's token checked with the GitHub API double) through the
# credential helper mesh_checkout writes, which asks the broker at use time.  The server listens
# on 127.0.0.1:GPORT inside each sandbox's own network namespace (the test puts its socket
# there), and on the host's loopback for the checks made from here.  The token opens only its
# repository; the helper refuses another host; an expired and a revoked token are refused by
# the server; a second run's token never reaches the first run; the refusals (no grant,
# egress, bad branch) come before any exec; no token value reaches an exec row, an event, a
# log or a NOTICE.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/git_server.sh"
plan 31
work=$(mktemp -d /tmp/mesh-checkout.XXXXXX)
chmod 755 "$work"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
repos_dir=$(cd "$(dirname "$0")/../repos" && pwd)
S=$$
GPORT=5791   # this session's port range; free on the host, and in every sandbox

# the GitHub API double, the App's key, two installed repositories with a commit each
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/app.pem" 2>/dev/null
openssl pkey -in "$work/app.pem" -pubout -out "$work/app.pub" 2>/dev/null
python3 "$repos_dir/github_double.py" "$work/port" 4242 "$work/app.pub" 77 octo widgets,gadgets,big &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
api="http://127.0.0.1:$(cat "$work/port")"
bare_repo widgets
bare_repo gadgets
bare_repo big 2000000   # what a clone transfers, a fetch need not
widgets_head=$(git -C "$work/git/octo/widgets.git" rev-parse main)

git_server host

q "SELECT mesh.repository_provider_set('gh-co', 'github', '127.0.0.1:$GPORT', '$api', '4242', '77')" >/dev/null
psql -X -qAt -v ON_ERROR_STOP=1 -v key="$(cat "$work/app.pem")" <<'SQL' >/dev/null
SELECT mesh.repository_provider_set_credential('gh-co', :'key');
SQL
q "SELECT mesh.repository_provider_set_git_url('gh-co', 'http://127.0.0.1:$GPORT')" >/dev/null
q "SELECT mesh.repository_register('octo/widgets', 'gh-co'), mesh.repository_register('octo/gadgets', 'gh-co'), mesh.repository_register('octo/big', 'gh-co')" >/dev/null
for run in co-a-$S co-b-$S; do
  q "SELECT 1 FROM mesh_acquire('$run', 'co-agent', 'alice')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$run', ARRAY['true'])" >/dev/null 2>>"$work/notices"  # materialized: its namespace exists
  git_server "$run" "$(in_sandbox "$run")"
done
q "SELECT mesh.repository_grant('co-a-$S', 'octo/widgets', '{\"contents\": \"write\"}')" >/dev/null
q "SELECT mesh.repository_grant('co-b-$S', 'octo/gadgets', '{\"contents\": \"read\"}')" >/dev/null

# --- refusals first: they come before any exec
execs_before=$(q "SELECT count(*) FROM mesh.execs WHERE run_id = 'co-a-$S'")
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT * FROM mesh_checkout('co-a-$S', 'octo/gadgets')" 2>&1)
like "$err" "42501.*run \"co-a-$S\" has no grant for repository \"octo/gadgets\"" "a repository the run has no grant for is refused (insufficient_privilege)"
like "$err" "HINT: +An admin grants it with mesh.repository_grant" "the refusal says how to get the grant"
err=$(psql -X -qAt -c "SELECT * FROM mesh_checkout('co-a-$S', 'octo/widgets', 'bad..branch')" 2>&1)
like "$err" 'is not a branch name this checkout accepts' "a malformed branch name is refused"
q "CREATE ROLE co_other_$S IN ROLE mesh_harness" >/dev/null
err=$(psql -X -qAt -c "SET ROLE co_other_$S; SELECT * FROM mesh_checkout('co-a-$S', 'octo/widgets')" 2>&1)
like "$err" "run \"co-a-$S\" is unknown or released" "another harness role cannot check out into the run"
err=$(psql -X -qAt -c "SET ROLE co_other_$S; SELECT * FROM mesh.checkout_plan('co-a-$S', 'octo/widgets')" 2>&1)
like "$err" "run \"co-a-$S\" is unknown or released" "nor learn its plan by calling mesh.checkout_plan itself (the caller is read, not passed)"
is "$(q "SELECT host FROM mesh.checkout_plan('co-a-$S', 'octo/widgets')")" "127.0.0.1:$GPORT" "the run's owner gets the plan (positive control)"
q "DROP ROLE co_other_$S" >/dev/null
saved=$(q "SELECT policy FROM mesh.egress_settings")
q "SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\", \"domains\": [\"example.org\"]}')" >/dev/null
q "SELECT 1 FROM mesh_acquire('co-e-$S', 'co-agent', 'alice')" >/dev/null
q "SELECT mesh.repository_grant('co-e-$S', 'octo/widgets')" >/dev/null
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT * FROM mesh_checkout('co-e-$S', 'octo/widgets')" 2>&1)
like "$err" "42501.*egress policy of run \"co-e-$S\" does not let its sandbox reach 127.0.0.1:$GPORT" \
     "a host the run's egress policy does not allow is refused"
if [ -n "$saved" ]; then q "UPDATE mesh.egress_settings SET policy = '$saved'" >/dev/null
else q "DELETE FROM mesh.egress_settings" >/dev/null; fi
q "SELECT mesh_release('co-e-$S')" >/dev/null
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id IN ('co-a-$S', 'co-e-$S')")" "$execs_before" "no refusal ran an exec"

# --- the three SQL calls: acquire (above), grant (above), checkout
out=$(psql -X -qAt -F ' ' -c "SELECT commit_sha, checked_out_branch, path FROM mesh_checkout('co-a-$S', 'octo/widgets', 'agent/fix-1')" 2>>"$work/notices")
is "$out" "$widgets_head agent/fix-1 /workspace/widgets" "mesh_checkout returns the commit it stands on, the working branch and the path"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = 'co-a-$S' AND argv[1] = 'sh'")" 3 "the checkout's steps are execs of the run, in mesh.execs"
is "$(q "SELECT stdout FROM mesh_exec('co-a-$S', ARRAY['sh', '-c', 'cd /workspace/widgets && git config user.name && git config user.email && git symbolic-ref --short HEAD && cat README'])")" \
   "$(printf 'co-agent\nco-agent@agents.mesh.invalid\nagent/fix-1\nwidgets')" "the clone commits as the agent, on the working branch"
like "$(grep -c ' 200 ' "$work/co-a-$S.log")" '^[1-9]' "git inside the sandbox talked to the git server with a token it accepted"
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = 'co-a-$S' AND kind = 'repository_token_read'")" 1 "the helper's fetch is an event of the run"
psql -X -qAt -c "SELECT commit_sha FROM mesh_checkout('co-a-$S', 'octo/widgets', 'agent/fix-1')" >/dev/null 2>>"$work/notices"
is "$(q "SELECT stdout FROM mesh_exec('co-a-$S', ARRAY['sh', '-c', 'cd /workspace/widgets && git symbolic-ref --short HEAD && git status --porcelain | wc -l'])")" \
   "$(printf 'agent/fix-1\n0')" "a second checkout of the same repository fetches and stays on the branch"

# --- the helper: only the granted host and repository
is "$(helper_ask co-a-$S "127.0.0.1:$GPORT" octo/widgets.git)" "$(printf 'username=x-access-token\npassword=(set)')" \
   "the helper answers for the granted host and repository (positive control)"
is "$(helper_ask co-a-$S "localhost:$GPORT" octo/widgets.git)" "" "the helper answers nothing for a host the grant does not name"
is "$(q "SELECT exit_code <> 0 FROM mesh_exec('co-a-$S', ARRAY['git', 'ls-remote', 'http://localhost:$GPORT/octo/widgets.git'], dir => '/workspace/widgets', env => '{\"GIT_TERMINAL_PROMPT\": \"0\"}')")" t \
   "so git cannot reach the repository under another host name"

# --- the token opens only its repository (checked at the server, from the host)
ha=$(token_sha co-a-$S octo/widgets)
is "$(status_with x-access-token "$ha" octo/widgets)" 200 "run co-a-$S's token opens octo/widgets at the git server (positive control)"
is "$(status_with x-access-token "$ha" octo/gadgets)" 403 "and not octo/gadgets on the same server"
is "$(q "SELECT exit_code <> 0 FROM mesh_exec('co-a-$S', ARRAY['git', 'clone', '-q', 'http://127.0.0.1:$GPORT/octo/gadgets.git', '/workspace/g'], env => '{\"GIT_TERMINAL_PROMPT\": \"0\"}')")" t \
   "a clone of another repository on the same server fails inside the run"

# --- a second run: its own token, never the first run's
out_b=$(psql -X -qAt -F ' ' -c "SELECT checked_out_branch FROM mesh_checkout('co-b-$S', 'octo/gadgets')" 2>>"$work/notices")
is "$out_b" main "a second run checks out its own repository (on the default branch)"
hb=$(token_sha co-b-$S octo/gadgets)
ok "$([ -n "$hb" ] && [ "$hb" != "$ha" ] && echo 0 || echo 1)" "with a token of its own"
is "$(helper_ask co-a-$S "127.0.0.1:$GPORT" octo/gadgets.git)" "" "the first run's helper gets nothing for the second run's repository"

# --- an expired token is refused by the server
curl -s -m 5 -X POST -d "{\"sha256\": \"$hb\"}" "$api/_double/expire" >/dev/null
is "$(status_with x-access-token "$hb" octo/gadgets)" 401 "an expired token is refused by the git server"

# --- release revokes; the revoked token is refused
value_a=$(q "SELECT token FROM mesh.repository_tokens WHERE run_id = 'co-a-$S' AND revoked_at IS NULL")
value_b=$(q "SELECT token FROM mesh.repository_tokens WHERE run_id = 'co-b-$S' AND revoked_at IS NULL")
echo "$value_a" > "$work/held-$ha"
q "SELECT mesh_release('co-a-$S')" >/dev/null
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(q "SELECT revoke_outcome FROM mesh.repository_tokens WHERE run_id = 'co-a-$S'")" revoked "release revoked run co-a-$S's token at the provider"
is "$(status_with x-access-token "$ha" octo/widgets)" 401 "the revoked token is refused by the git server"

# --- the warm path: a run started from a snapshot holding the clone fetches only what is new
# served_bytes RUN: the bytes the git server in RUN's sandbox answered (its log: method path status bytes)
served_bytes() { awk 'NF == 4 { s += $4 } END { print s + 0 }' "$work/$1.log"; }
# a materialized run of project co-proj-$S with the git server in its sandbox and octo/big granted
warm_run() {
  q "SELECT 1 FROM mesh_acquire('$1', 'co-agent', 'alice', project => 'co-proj-$S')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$1', ARRAY['true'])" >/dev/null 2>>"$work/notices"
  git_server "$1" "$(in_sandbox "$1")"
  q "SELECT mesh.repository_grant('$1', 'octo/big')" >/dev/null
}
warm_run co-w1-$S
psql -X -qAt -c "SELECT commit_sha FROM mesh_checkout('co-w1-$S', 'octo/big')" >/dev/null 2>>"$work/notices"
q "SELECT id FROM mesh_snapshot('co-w1-$S')" >/dev/null
q "SELECT mesh_release('co-w1-$S')" >/dev/null
echo news > "$work/src-big/NEWS"
git -C "$work/src-big" add NEWS
git -C "$work/src-big" -c user.name=t -c user.email=t@t commit -q -m "big: news"
git -C "$work/src-big" push -q "$work/git/octo/big.git" main
big_head=$(git -C "$work/git/octo/big.git" rev-parse main)
warm_run co-w2-$S
is "$(q "SELECT stdout FROM mesh_exec('co-w2-$S', ARRAY['sh', '-c', 'test -f /workspace/big/blob && git -C /workspace/big log --format=%s -1'])")" \
   "big: first" "a run of the project starts with the snapshot's clone, a commit behind"
out=$(psql -X -qAt -F ' ' -c "SELECT commit_sha, checked_out_branch FROM mesh_checkout('co-w2-$S', 'octo/big')" 2>>"$work/notices")
is "$out" "$big_head main" "its checkout stands on the new upstream commit"
cold=$(served_bytes co-w1-$S); warm=$(served_bytes co-w2-$S)
ok "$([ "$cold" -gt 2000000 ] && [ "$warm" -gt 0 ] && [ $((warm * 20)) -lt "$cold" ] && echo 0 || echo 1)" \
   "it fetched only the delta: $warm bytes from the git server, against $cold for the clone"
q "SELECT mesh_release('co-w2-$S')" >/dev/null

# --- no token value anywhere it must not be
leaks=0
for v in "$value_a" "$value_b"; do
  leaks=$((leaks + $(q "SELECT count(*) FROM mesh.execs WHERE array_to_string(argv, ' ') LIKE '%$v%' OR stdout LIKE '%$v%' OR stderr LIKE '%$v%'")))
  leaks=$((leaks + $(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$v%'")))
  grep -rqF "$v" "$PGDIR"/*.log "$PGDIR"/data/log "$work"/*.log "$work/notices" 2>/dev/null && leaks=$((leaks + 1))
done
ok "$([ -n "$value_a" ] && [ -n "$value_b" ] && [ "$leaks" -eq 0 ] && echo 0 || echo 1)" "the token is in no exec row, event, server or git-server log, or NOTICE"
q "SELECT mesh_release('co-b-$S')" >/dev/null
# the broker's revocation round answered before the double goes away (its token had expired there)
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(q "SELECT revoke_outcome FROM mesh.repository_tokens WHERE run_id = 'co-b-$S'")" "already invalid" \
   "the second run's expired token is recorded as already invalid at the provider"
