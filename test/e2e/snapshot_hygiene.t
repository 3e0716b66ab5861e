#!/usr/bin/env bash
# Snapshots never carry credentials, and give their disk back at once, on the embedded default:
# run A fetches a granted secret through the broker and keeps it where runs keep such things
# (/workspace/.mesh/, and a .env its .meshignore names); its capture holds neither the run token
# nor the secret; run B of the same project starts from it with its own, different token and no
# trace of A's; a run without grants finds no /workspace/.mesh at all. Then a retired snapshot
# is reclaimed (row and the daemon's tree) within seconds, without mesh.sweep(), in the three
# ways one is freed: the release of the last run on it, mesh.snapshot_retire, and a capture
# that replaces the project's current one (the reaper's sweep is every 10 minutes by default).
# A hostile .meshignore fails a capture with a clear error.
. "$(dirname "$0")/lib.sh"
plan 20
SNAPS="$PGDIR/data/mesh_sandboxd/workspaces/.snapshots"
tag="hyg$$"
project="github.com/$tag/app"
canary="CANARY-$RANDOM$RANDOM-snapshot"
out() { q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c', \$m\$$2\$m\$])" 2>/dev/null; }
snap_of() { q "SELECT id FROM mesh.snapshots WHERE source_run_id = '$1' ORDER BY created_at DESC LIMIT 1"; }
ref_of_snap() { q "SELECT external_ref FROM mesh.snapshots WHERE id = $1"; }
# reclaimed_within ID: polls (at most 60 s) until snapshot ID's row is reclaimed and the daemon
# no longer holds its tree; prints the final "STATUS TREE" either way
reclaimed_within() {
  local ref status tree
  ref=$(ref_of_snap "$1")
  for _ in $(seq 1 120); do
    status=$(q "SELECT status FROM mesh.snapshots WHERE id = $1")
    tree=$([ -e "$SNAPS/$ref" ] && echo present || echo gone)
    [ "$status $tree" = "reclaimed gone" ] && break
    sleep 0.5
  done
  echo "$status $tree"
}

q "SELECT mesh.secret_set('$tag-agent', 'api_key', '$canary')" >/dev/null
q "SELECT mesh.environment_set('$tag-env', '[{\"kind\": \"secret\", \"name\": \"api_key\"}]')" >/dev/null

# A: fetches its secret through the broker and keeps it in /workspace
q "SELECT 1 FROM mesh_acquire('$tag-a', '$tag-agent', 'alice', environment => '$tag-env', project => '$project')" >/dev/null
out "$tag-a" 'set -e; v=$(curl -s --unix-socket /run/mesh/broker.sock -X POST \
  -H "Authorization: Bearer $(cat /workspace/.mesh/run-token)" http://mesh/v1/secrets/api_key)
  mkdir -p .mesh/secrets; echo "$v" > .mesh/secrets/api_key; echo "$v" > .env
  printf "# kept out of snapshots\n.env\n" > .meshignore; echo code > app.py' >/dev/null
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = '$tag-a' AND kind = 'secret_read'")" 1 \
   "A read its granted secret through the broker"
token_a=$(out "$tag-a" 'cat .mesh/run-token' | tr -d '\n')
is "$(out "$tag-a" 'grep -l -r -F -e "$(cat .mesh/secrets/api_key)" . | sort | xargs')" "./.env ./.mesh/secrets/api_key" \
   "A keeps it in /workspace/.mesh/secrets and in .env (the value is only ever compared inside)"
is "$(q "SELECT status FROM mesh_snapshot('$tag-a')")" ready "A's /workspace is captured"
SA=$(snap_of "$tag-a")
tree="$SNAPS/$(ref_of_snap "$SA")/tree"
is "$(cd "$tree" && find . -mindepth 1 | sort | xargs)" "./.meshignore ./app.py" \
   "the snapshot holds neither /workspace/.mesh (the run token, the secret) nor what .meshignore names"
grep -r -q -F -e "$canary" -e "$token_a" "$tree"; ok $((! $?)) "no byte of the secret or of A's token is in it"

# B: the same project, with grants: its own token, nothing of A's
q "SELECT 1 FROM mesh_acquire('$tag-b', '$tag-agent', 'bob', environment => '$tag-env', project => '$project')" >/dev/null
seen=$(out "$tag-b" 'ls -A | xargs; ls -A .mesh | xargs')
is "$seen" "$(printf '.mesh .meshignore app.py\nrun-token')" \
   "B starts from the snapshot with only its own run token in .mesh: no secret file, no .env"
is "$(q "SELECT snapshot_id FROM mesh.workspaces WHERE run_id = '$tag-b'")" "$SA" "B stands on A's snapshot"
token_b=$(out "$tag-b" 'cat .mesh/run-token' | tr -d '\n')
ok $(( ${#token_b} > 20 && ${#token_a} > 20 ? 0 : 1 )) "A and B each have a token"
ok $([ "$token_a" != "$token_b" ]; echo $?) "B's token is not A's"
# control: the same request with A's token from A's own sandbox gets the value
out "$tag-a" 'curl -s --unix-socket /run/mesh/broker.sock -X POST -H "Authorization: Bearer '"$token_a"'" http://mesh/v1/secrets/api_key' \
  | grep -q '"value"'
ok $? "control: A's token, from A's sandbox, gets the secret"
out "$tag-b" 'curl -s --unix-socket /run/mesh/broker.sock -X POST -H "Authorization: Bearer '"$token_a"'" http://mesh/v1/secrets/api_key' \
  | grep -q '"value"'
ok $((! $?)) "A's token does not work from B's sandbox"
# C: from the snapshot without grants: no token, no .mesh
q "SELECT 1 FROM mesh_acquire('$tag-c', '$tag-agent', 'carol', from_snapshot => $SA)" >/dev/null
is "$(out "$tag-c" 'ls -A | xargs')" ".meshignore app.py" "a run without grants started from it has no /workspace/.mesh"

# reclaim 1: a capture retires A's snapshot while B and C stand on it; their release frees it
is "$(q "SELECT status FROM mesh_snapshot('$tag-b')")" ready "B's capture becomes the project's current snapshot"
SB=$(snap_of "$tag-b")
is "$(q "SELECT status FROM mesh.snapshots WHERE id = $SA")" retired "A's is retired, kept while runs stand on it"
q "SELECT mesh_release('$tag-b')" >/dev/null
q "SELECT mesh_release('$tag-c')" >/dev/null
is "$(reclaimed_within "$SA")" "reclaimed gone" \
   "released the last run on it, the retired snapshot is reclaimed within seconds, without a sweep"

# reclaim 2: the admin retires the current snapshot, which no run stands on
q "SELECT 1 FROM mesh.snapshot_retire($SB)" >/dev/null
is "$(reclaimed_within "$SB")" "reclaimed gone" "mesh.snapshot_retire frees it within seconds"

# reclaim 3: two captures in a row: the first is replaced (retired) by the second at once
q "SELECT 1 FROM mesh_snapshot('$tag-a')" >/dev/null
SC=$(snap_of "$tag-a")
q "SELECT 1 FROM mesh_snapshot('$tag-a')" >/dev/null
is "$(reclaimed_within "$SC")" "reclaimed gone" "a capture that replaces the current snapshot frees it within seconds"
is "$(q "SELECT count(*) FROM mesh.events WHERE kind = 'snapshot_reclaimed' AND (detail->>'snapshot')::bigint IN ($SA, $SB, $SC)")" 3 \
   "each reclaim is an event"

# a hostile .meshignore fails the capture clearly and leaves the current snapshot current
SD=$(snap_of "$tag-a")
out "$tag-a" 'rm .meshignore; ln -s /etc/shadow .meshignore' >/dev/null
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT mesh_snapshot('$tag-a')" 2>&1 | head -1)
case "$err" in *22023*"/workspace/.meshignore is a symlink"*) r=0 ;; *) r=1 ;; esac
ok $r "a .meshignore that is a symlink to /etc/shadow fails the capture with 22023 and why: $err"
is "$(q "SELECT string_agg(status::text, ' ' ORDER BY created_at) FROM mesh.snapshots WHERE source_run_id = '$tag-a'
           AND created_at >= (SELECT created_at FROM mesh.snapshots WHERE id = $SD)")" \
   "ready failed" "its row is failed; the project's current snapshot stays current"
q "SELECT mesh_release('$tag-a')" >/dev/null
done_testing
