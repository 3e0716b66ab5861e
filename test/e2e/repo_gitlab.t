#!/usr/bin/env bash
# GitLab repository tokens: a harness checks out a GitLab project with mesh_checkout; the broker
# mints a project access token at the GitLab API double (test/repos/gitlab_double.py: the
# install token in PRIVATE-TOKEN, the project, scopes, access level and expiry checked), and real
# git inside real sandboxes reaches a real git server (test/repos/git_server.py, every request's
# token checked with the double, which insists on the user name oauth2).  The token opens only
# its project on its host; a second run's token never reaches the first; the helper answers
# nothing for a host the grant does not name; release revokes the token at GitLab by its id and
# records the outcome, and so does the expiry sweep; a wrong install token fails the mint
# legibly; the install token is in no URL, log, row, event or error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/git_server.sh"
plan 27
work=$(mktemp -d /tmp/mesh-gitlab.XXXXXX)
chmod 755 "$work"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
S=$$
GPORT=5701   # this session's port: free on the host, and in every sandbox
install="glpat-install-$(openssl rand -hex 12)"
echo "$install" > "$work/install-token"

python3 "$(dirname "$0")/../repos/gitlab_double.py" "$work/port" "$work/install-token" octo/widgets,octo/gadgets &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
api="http://127.0.0.1:$(cat "$work/port")"
double() { curl -s -m 5 "$api/_double/$1"; }
bare_repo widgets
bare_repo gadgets
widgets_head=$(git -C "$work/git/octo/widgets.git" rev-parse main)
git_server host

q "SELECT mesh.repository_provider_set('gl-$S', 'gitlab', '127.0.0.1:$GPORT', '$api/api/v4')" >/dev/null
psql -X -qAt -v ON_ERROR_STOP=1 -v key="$install" <<SQL >/dev/null
SELECT mesh.repository_provider_set_credential('gl-$S', :'key');
SQL
q "SELECT mesh.repository_provider_set_git_url('gl-$S', 'http://127.0.0.1:$GPORT')" >/dev/null
q "SELECT mesh.repository_register('octo/widgets', 'gl-$S', '{\"contents\": \"write\", \"merge_requests\": \"write\"}'),
          mesh.repository_register('octo/gadgets', 'gl-$S', '{\"contents\": \"write\"}')" >/dev/null
for run in gl-a-$S gl-b-$S; do
  q "SELECT 1 FROM mesh_acquire('$run', 'gl-agent', 'alice')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$run', ARRAY['true'])" >/dev/null 2>>"$work/notices"
  git_server "$run" "$(in_sandbox "$run")"
done
q "SELECT mesh.repository_grant('gl-a-$S', 'octo/widgets', '{\"contents\": \"write\"}')" >/dev/null
q "SELECT mesh.repository_grant('gl-b-$S', 'octo/gadgets', '{\"contents\": \"read\"}')" >/dev/null

# --- the checkout, with a project access token minted at GitLab
out=$(psql -X -qAt -F ' ' -c "SELECT commit_sha, checked_out_branch, path FROM mesh_checkout('gl-a-$S', 'octo/widgets', 'agent/fix-1')" 2>>"$work/notices")
is "$out" "$widgets_head agent/fix-1 /workspace/widgets" "mesh_checkout clones a GitLab project into the run's workspace"
like "$(grep -c ' 200 ' "$work/gl-a-$S.log")" '^[1-9]' "git inside the sandbox talked to the git server with a token it accepted"
ha=$(token_sha gl-a-$S octo/widgets)
is "$(double tokens | python3 -c "import json,sys; print(' '.join(f\"{t['project']} {t['scopes']} {t['access_level']} {t['live']}\" for t in json.load(sys.stdin) if t['sha256'] == '$ha'))")" \
   "octo/widgets ['read_repository', 'write_repository'] 30 True" "GitLab minted it for exactly that project: read and write_repository, Developer, no api"
is "$(double tokens | python3 -c "import json,sys; print([t['id'] for t in json.load(sys.stdin) if t['sha256'] == '$ha'][0])")" \
   "$(q "SELECT provider_token_id FROM mesh.repository_tokens WHERE run_id = 'gl-a-$S'")" "its row keeps GitLab's id for it (to revoke it)"
is "$(q "SELECT expires_at <= minted_at + interval '1 hour' FROM mesh.repository_tokens WHERE run_id = 'gl-a-$S'")" t \
   "its row expires within the hour (GitLab's expiry is a day)"
is "$(helper_ask gl-a-$S "127.0.0.1:$GPORT" octo/widgets.git)" "$(printf 'username=oauth2\npassword=(set)')" \
   "the helper hands git the user name oauth2 with a GitLab token"
is "$(helper_ask gl-a-$S "localhost:$GPORT" octo/widgets.git)" "" "the helper answers nothing for a host the grant does not name"
is "$(q "SELECT exit_code FROM mesh_exec('gl-a-$S', ARRAY['sh', '-c', 'echo fix > FIX && git add FIX && git commit -qm fix && git push -q origin agent/fix-1'], dir => '/workspace/widgets', env => '{\"GIT_TERMINAL_PROMPT\": \"0\"}')")" 0 \
   "a write grant pushes the working branch"

# --- the token opens only its project, with the user name oauth2 (checked from the host)
is "$(status_with oauth2 "$ha" octo/widgets)" 200 "the token opens its project at the git server (positive control)"
is "$(status_with oauth2 "$ha" octo/gadgets)" 403 "and not another project on the same server"
is "$(status_with x-access-token "$ha" octo/widgets)" 401 "GitLab's git takes it with the user name oauth2 only (the double insists)"

# --- a second run: its own read-only token, never the first run's
is "$(psql -X -qAt -c "SELECT checked_out_branch FROM mesh_checkout('gl-b-$S', 'octo/gadgets')" 2>>"$work/notices")" main \
   "a second run checks out its own project"
hb=$(token_sha gl-b-$S octo/gadgets)
ok "$([ -n "$hb" ] && [ "$hb" != "$ha" ] && echo 0 || echo 1)" "with a token of its own"
is "$(double tokens | python3 -c "import json,sys; print(' '.join(f\"{t['scopes']} {t['access_level']}\" for t in json.load(sys.stdin) if t['sha256'] == '$hb'))")" \
   "['read_repository'] 20" "a read grant's token: read_repository, Reporter"
is "$(helper_ask gl-a-$S "127.0.0.1:$GPORT" octo/gadgets.git)" "" "the first run's helper gets nothing for the second run's project"
is "$(q "SELECT exit_code <> 0 FROM mesh_exec('gl-b-$S', ARRAY['sh', '-c', 'echo x > X && git add X && git -c user.name=t -c user.email=t@t commit -qm x && git push -q origin HEAD:refs/heads/nope'], dir => '/workspace/gadgets', env => '{\"GIT_TERMINAL_PROMPT\": \"0\"}')")" t \
   "a read grant's token cannot push"

# --- release revokes at GitLab by the token's id, and the outcome is kept
value_a=$(q "SELECT token FROM mesh.repository_tokens WHERE run_id = 'gl-a-$S' AND revoked_at IS NULL")
value_b=$(q "SELECT token FROM mesh.repository_tokens WHERE run_id = 'gl-b-$S' AND revoked_at IS NULL")
echo "$value_a" > "$work/held-$ha"
echo "$value_b" > "$work/held-$hb"
q "SELECT mesh_release('gl-a-$S')" >/dev/null
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(q "SELECT revoke_outcome || ' ' || (token IS NULL) FROM mesh.repository_tokens WHERE run_id = 'gl-a-$S'")" "revoked true" \
   "release revoked the token at GitLab and the row forgot its value"
is "$(status_with oauth2 "$ha" octo/widgets)" 401 "the revoked token is refused by the git server"

# --- the expiry sweep: a token past its row's expiry is revoked at GitLab (where it lives to the end of a day)
q "UPDATE mesh.repository_tokens SET expires_at = now() - interval '1 second' WHERE run_id = 'gl-b-$S' AND revoked_at IS NULL" >/dev/null
is "$(q "SELECT count(*) FROM mesh.sweep() WHERE action = 'repository_tokens_expired'")" 1 "the reaper's sweep ends the token past its expiry"
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
is "$(q "SELECT revoked_reason || ' ' || revoke_outcome FROM mesh.repository_tokens WHERE run_id = 'gl-b-$S'")" "expired revoked" \
   "and the broker revoked it at GitLab, the outcome recorded"
is "$(status_with oauth2 "$hb" octo/gadgets)" 401 "the swept token is refused by the git server"
is "$(helper_ask gl-b-$S "127.0.0.1:$GPORT" octo/gadgets.git)" "$(printf 'username=oauth2\npassword=(set)')" \
   "the run's next fetch mints a fresh token"
is "$(double counters | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["mints"], d["revokes"], d["unauthorized"])')" "3 2 0" \
   "GitLab saw three mints and two revocations, all with the install token"

# --- a wrong install token: the mint fails legibly, naming no token
psql -X -qAt -v ON_ERROR_STOP=1 -v key="wrong-$install" <<SQL >/dev/null
SELECT mesh.repository_provider_set_credential('gl-$S', :'key');
SQL
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
answer=$(q "SELECT stdout FROM mesh_exec('gl-b-$S', ARRAY['sh', '-c', 'printf \"Authorization: Bearer %s\\n\" \"\$(cat /workspace/.mesh/run-token)\" | curl -s --unix-socket /run/mesh/broker.sock -X POST -H @- http://mesh/v1/repositories/127.0.0.1:$GPORT/octo/gadgets/token'])")
like "$answer" 'mint_failed.*the provider answered HTTP 401 to the mint' "a mint GitLab refuses is a mint_failed answer that says why"

# --- no install token or token value anywhere it must not be
leaks=0
for v in "$install" "wrong-$install" "$value_a" "$value_b"; do
  leaks=$((leaks + $(q "SELECT count(*) FROM mesh.execs WHERE array_to_string(argv, ' ') LIKE '%$v%' OR stdout LIKE '%$v%' OR stderr LIKE '%$v%'")))
  leaks=$((leaks + $(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$v%'")))
  leaks=$((leaks + $(q "SELECT count(*) FROM mesh.repository_providers p WHERE p::text LIKE '%$v%'")))
  grep -rqF "$v" "$PGDIR"/*.log "$PGDIR"/data/log "$work"/*.log "$work/notices" 2>/dev/null && leaks=$((leaks + 1))
  double paths | grep -qF "$v" && leaks=$((leaks + 1))
done
ok "$([ -n "$value_a" ] && [ -n "$value_b" ] && [ "$leaks" -eq 0 ] && echo 0 || echo 1)" \
   "neither the install token nor a token is in an exec row, event, provider row, server or git-server log, NOTICE or URL"
is "$(q "SELECT count(*) FROM mesh.repository_tokens WHERE token LIKE '%$install%'")" 0 "no token row holds the install token"
is "$(psql -X -qAt -c "SET ROLE mesh_admin; SELECT credential FROM mesh.repository_provider_credentials" 2>&1 | grep -c "permission denied")" 1 \
   "the install token is write-only: an admin cannot read it back"
q "SELECT mesh_release('gl-b-$S')" >/dev/null
wait_for "SELECT count(*) = 0 FROM mesh.repository_tokens WHERE revoke_outcome = 'pending'" 450
