#!/usr/bin/env bash
# Project-state snapshots end to end on the embedded default: run A writes a tree and
# captures it; run B of the same project sees it at its first exec; B's writes are invisible
# to run C started later from the same snapshot; five children forked from one snapshot at
# once each see the parent's tree and none of their siblings' writes; the release of the
# last run on a retired snapshot reclaims it (row and the daemon's tree); reconciliation
# deletes a snapshot no row explains and fails a row whose snapshot vanished; a daemon
# SIGKILLed during a capture leaves no 'capturing' row after the sweep, and nothing half made
# on the daemon; a capture that does not fit the disk fails cleanly.
. "$(dirname "$0")/lib.sh"
plan 25
SOCK="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
SNAPS="$PGDIR/data/mesh_sandboxd/workspaces/.snapshots"
tag="snp$$"
project="github.com/$tag/app"
daemon() {  # daemon METHOD PATH [BODY]: the embedded daemon's API, behind mesh's back
  curl -s --max-time 30 --unix-socket "$SOCK" -X "$1" "http://localhost$2" \
       ${3:+-H 'Content-Type: application/json' --data-binary "$3"}
}
out() { q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c', \$m\$$2\$m\$])" 2>/dev/null; }
snap_of() { q "SELECT id FROM mesh.snapshots WHERE source_run_id = '$1' ORDER BY created_at DESC LIMIT 1"; }
ref_of_snap() { q "SELECT external_ref FROM mesh.snapshots WHERE id = $1"; }

# A: a tree of a few hundred files, captured
q "SELECT 1 FROM mesh_acquire('$tag-a', '$tag-agent', 'alice', project => '$project')" >/dev/null
out "$tag-a" 'mkdir -p node_modules && for i in $(seq 1 300); do mkdir -p node_modules/p$i && echo "module $i" > node_modules/p$i/index.js; done; echo from-a > README' >/dev/null
row=$(q "SELECT status || ' ' || file_count || ' ' || (size_bytes > 0) FROM mesh_snapshot('$tag-a')")
is "$row" "ready 301 true" "A's capture is ready and counts its files"
SA=$(snap_of "$tag-a")
[ -d "$SNAPS/$(ref_of_snap "$SA")/tree/node_modules/p300" ]; ok $? "the daemon holds the tree under the row's reference"

# B: same project, sees A's tree at its first exec, writes its own
q "SELECT 1 FROM mesh_acquire('$tag-b', '$tag-agent', 'bob', project => '$project')" >/dev/null
notice=$(psql -X -qAt -c "SELECT exit_code FROM mesh_exec('$tag-b', ARRAY['true'])" 2>&1 | grep NOTICE)
case "$notice" in *"(snapshot $SA of project \"$project\": "*" in 301 files, captured "*" ago)"*) r=0 ;; *) r=1 ;; esac
ok $r "B's set-up NOTICE says which snapshot, its size and age: $notice"
is "$(out "$tag-b" 'cat README node_modules/p7/index.js')" "$(printf 'from-a\nmodule 7')" "B sees A's tree at its first exec"
out "$tag-b" 'echo from-b > README; rm -r node_modules/p1; echo b > b-only' >/dev/null
is "$(q "SELECT snapshot_id FROM mesh.workspaces WHERE run_id = '$tag-b'")" "$SA" "B's row records the snapshot it stands on"

# C: from the same snapshot, later: none of B's writes
q "SELECT 1 FROM mesh_acquire('$tag-c', '$tag-agent', 'carol', from_snapshot => $SA)" >/dev/null
is "$(out "$tag-c" 'cat README; ls node_modules | wc -l; ls b-only 2>&1 >/dev/null | grep -c "No such"')" \
   "$(printf 'from-a\n300\n1')" "C, started from the same snapshot, sees none of B's writes"
is "$(out "$tag-a" 'cat README')" from-a "nor does A, which keeps working after its capture"
# idle hibernation and wake keep C's view: the snapshot's tree and C's own writes
out "$tag-c" 'echo c > c-own' >/dev/null
q "SELECT mesh.run_set_budget('$tag-c', idle_timeout => '1 second')" >/dev/null
sleep 1.5
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
q "SELECT mesh.run_set_budget('$tag-c', idle_timeout => '1 hour')" >/dev/null
is "$(q "SELECT status FROM mesh.workspaces WHERE run_id = '$tag-c'")/$(out "$tag-c" 'cat README c-own' | xargs)" \
   "pending/from-a c" "C, hibernated while idle, wakes standing on the snapshot with its own writes"

# fork: five children from one snapshot, at once
pids=()
for i in 1 2 3 4 5; do
  ( q "SELECT 1 FROM mesh_acquire('$tag-k$i', '$tag-agent', 'kid', from_snapshot => $SA)" >/dev/null &&
    out "$tag-k$i" "echo child-$i > mine; echo child-$i > README" >/dev/null ) &
  pids+=($!)
done
fails=0; for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
is "$fails" 0 "five children start from one snapshot concurrently"
seen=""
for i in 1 2 3 4 5; do seen+="$(out "$tag-k$i" 'cat mine README; ls node_modules | wc -l' | xargs)|"; done
is "$seen" "child-1 child-1 300|child-2 child-2 300|child-3 child-3 300|child-4 child-4 300|child-5 child-5 300|" \
   "each child sees the parent's tree and only its own writes"
is "$(q "SELECT live_workspaces FROM mesh.project_snapshots WHERE snapshot_id = $SA")" 7 \
   "the operators' view counts the live workspaces standing on the snapshot"

# a new capture (from B) becomes current; the old one is retired, kept while runs stand on it
q "SELECT 1 FROM mesh_snapshot('$tag-b')" >/dev/null
SB=$(snap_of "$tag-b")
is "$(q "SELECT string_agg(snapshot_id || ':' || status || ':' || current, ' ' ORDER BY created_at) FROM mesh.project_snapshots WHERE project = '$project'")" \
   "$SA:retired:false $SB:ready:true" "the new capture is current, the old one retired"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(q "SELECT status FROM mesh.snapshots WHERE id = $SA")" retired "a sweep keeps a retired snapshot live runs stand on"
for r in a b c k1 k2 k3 k4 k5; do q "SELECT mesh_release('$tag-$r')" >/dev/null; done
# the last release wakes the reaper: no sweep is needed (polled, at most 60 s)
for _ in $(seq 1 120); do
  [ "$(q "SELECT status FROM mesh.snapshots WHERE id = $SA")" = reclaimed ] && break
  sleep 0.5
done
is "$(q "SELECT status FROM mesh.snapshots WHERE id = $SA")" reclaimed "once they are released, it is reclaimed: its row says so"
[ ! -e "$SNAPS/$(ref_of_snap "$SA")" ]; ok $? "and the daemon no longer holds its tree"
q "SELECT 1 FROM mesh.snapshot_retire($SB)" >/dev/null

# reconciliation: a stray no row explains is deleted; a row whose snapshot vanished fails
install=$(q "SELECT system_identifier FROM pg_control_system()")
q "SELECT 1 FROM mesh_acquire('$tag-s', '$tag-agent', 'sam', project => '$project')" >/dev/null
out "$tag-s" 'echo s > s' >/dev/null
stray="mesh-$install-snap-9${RANDOM}9"
daemon PUT "/v1/snapshots/$stray" "{\"workspace\": \"$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$tag-s'")\", \"labels\": {\"mesh.install\": \"$install\", \"mesh.backend\": \"local\"}}" >/dev/null
q "SELECT 1 FROM mesh_snapshot('$tag-s')" >/dev/null
SS=$(snap_of "$tag-s")
daemon DELETE "/v1/snapshots/$(ref_of_snap "$SS")" >/dev/null
did=$(q "SELECT string_agg(action, ',' ORDER BY action) FROM mesh.sweep() WHERE action IN ('orphan_snapshot_deleted', 'snapshot_failed')")
is "$did" "orphan_snapshot_deleted,snapshot_failed" "a sweep deletes the stray and fails the vanished one"
[ ! -e "$SNAPS/$stray" ]; ok $? "the stray is gone from the daemon"
is "$(q "SELECT status || ': ' || status_reason FROM mesh.snapshots WHERE id = $SS")" \
   "failed: the backend no longer has this snapshot" "the vanished one's row says why it failed"

# a daemon SIGKILLed during a capture of a large tree
out "$tag-s" 'mkdir big && cd big && for d in $(seq 1 40); do mkdir $d; for f in $(seq 1 500); do echo $d.$f > $d/$f; done; done' >/dev/null
psql -X -qAt -c "SELECT mesh_snapshot('$tag-s')" > /dev/null 2>"$PGDIR/$tag.err" &
caller=$!
for _ in $(seq 1 200); do ls -d "$SNAPS"/.capture-* >/dev/null 2>&1 && break; sleep 0.05; done
daemon_pid=$(pgrep -u postgres -f "mesh-sandboxd --socket $PGDIR" | head -1)
kill -KILL "$daemon_pid"
wait "$caller"; ok $(( $? == 0 )) "the capture's caller gets an error"
wait_daemon_ready; ok $? "the supervisor starts the daemon again"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(q "SELECT count(*) FROM mesh.snapshots WHERE status = 'capturing'")" 0 "no capturing row is left after the sweep"
is "$(ls -A "$SNAPS" | grep -c '^\.capture-')" 0 "and nothing half made on the daemon"
# a capturing row whose worker died too (no answer ever came) is settled by the sweep
q "INSERT INTO mesh.snapshots (project, backend, external_ref, source_run_id, actor_id, created_at)
   VALUES ('$project', 'local', 'mesh-$install-snap-lost$$', '$tag-s', 'sam', now() - interval '2 minutes')" >/dev/null
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(q "SELECT status || ': ' || status_reason FROM mesh.snapshots WHERE external_ref = 'mesh-$install-snap-lost$$'")" \
   "failed: the capture was interrupted (the backend does not have it)" "an interrupted capture's row is failed by the sweep, with the reason"
# a capture that does not fit the workspaces' filesystem (test/run.sh gives it 512 MB; each
# workspace holds at most its disk quota, a quarter of it: other runs fill the rest)
out "$tag-s" 'rm -rf big; head -c 300000000 /dev/zero > huge; echo written' >/dev/null
for f in f1 f2 f3; do
  q "SELECT 1 FROM mesh_acquire('$tag-$f', '$tag-agent', 'filler')" >/dev/null
  out "$tag-$f" 'head -c 300000000 /dev/zero > huge' >/dev/null
done
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT mesh_snapshot('$tag-s')" 2>&1)
case "$err" in *53000*) r=0 ;; *) r=1 ;; esac
ok $r "a capture that does not fit fails with 53000: $(echo "$err" | head -1)"
is "$(q "SELECT status || ' ' || (status_reason LIKE '%full%') FROM mesh.snapshots WHERE source_run_id = '$tag-s' ORDER BY created_at DESC LIMIT 1")" \
   "failed true" "its row is failed, saying the disk is full; nothing half made is ready"
for r in s f1 f2 f3; do q "SELECT mesh_release('$tag-$r')" >/dev/null; done
done_testing
