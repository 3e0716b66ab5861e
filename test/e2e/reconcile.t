#!/usr/bin/env bash
# A row's state is always recoverable from the backend. A transient failure during acquire
# puts the row back to pending (no concurrency slot held; the run's next call tries again),
# and a sweep settles every live row to what the backend's list shows: acquiring with nothing
# there -> pending; ready or acquiring but hibernated by the backend -> pending (the next call
# wakes it); pending with a running sandbox (an acquire whose answer was lost) -> ready; a
# failed row's sandbox is released.
. "$(dirname "$0")/lib.sh"
plan 20
SOCK="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
tag="rec$$"
daemon() {  # daemon METHOD PATH [BODY]: the embedded daemon's API, behind mesh's back
  curl -sf --max-time 10 --unix-socket "$SOCK" -X "$1" "http://localhost$2" \
       ${3:+-H 'Content-Type: application/json' --data-binary "$3"} >/dev/null
}
row() { q "SELECT status || ': ' || coalesce(status_reason, '') FROM mesh.workspaces WHERE run_id = '$1'"; }
live() { q "SELECT count(*) FROM mesh.workspaces WHERE agent_id = '$1' AND status IN ('acquiring', 'ready', 'releasing')"; }
ref_of() { q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'"; }
sweep_did() { q "SELECT string_agg(action, ',') FROM mesh.sweep() WHERE run_id = '$1'"; }

# 1. the backend is away during acquire (a socket briefly gone, as in a daemon restart)
q "SELECT mesh.backend_add('$tag', 'sandboxd', '{\"socket\": \"/nonexistent/$tag.sock\"}', catalog_order => 1000)" >/dev/null
q "SELECT mesh.agent_set('$tag-a', backend => '$tag')" >/dev/null
q "SELECT 1 FROM mesh.agent_set_budget('$tag-a', max_concurrent_workspaces => 1)" >/dev/null
q "SELECT 1 FROM mesh_acquire('$tag-1', '$tag-a', 'kim')" >/dev/null
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT exit_code FROM mesh_exec('$tag-1', ARRAY['true'])" 2>&1)
echo "$err" | grep -q '08006'; ok $? "acquire against an absent backend fails with 08006"
case "$(row "$tag-1")" in "pending: acquire interrupted: "*"the run's next call tries again") r=0 ;; *) r=1 ;; esac
ok $r "the row goes back to pending, with the reason: $(row "$tag-1")"
is "$(live "$tag-a")" 0 "it holds none of the agent's concurrency slots"
is "$(ref_of "$tag-1" | grep -c .)" 1 "it keeps its backend reference, so nothing made is forgotten"
q "SELECT mesh.backend_configure('$tag', '{\"socket\": \"$SOCK\"}')" >/dev/null
is "$(q "SELECT stdout FROM mesh_exec('$tag-1', ARRAY['echo', 'again'])" 2>/dev/null)" again \
   "the run's next call tries again and succeeds once the backend is back"
is "$(row "$tag-1")" "ready: " "the row is ready"
q "SELECT mesh_release('$tag-1')" >/dev/null
# two catalog entries on one daemon would each see the other's sandboxes as orphans
q "SELECT mesh.backend_configure('$tag', '{\"socket\": \"/nonexistent/$tag.sock\"}')" >/dev/null
q "SELECT mesh.backend_disable('$tag')" >/dev/null

# 2. acquiring, and the backend has nothing (a worker killed mid-acquire): pending at the sweep
q "SELECT 1 FROM mesh_acquire('$tag-2', '$tag-b', 'kim')" >/dev/null
q "SELECT exit_code FROM mesh_exec('$tag-2', ARRAY['sh', '-c', 'echo kept > f.txt'])" >/dev/null
ref=$(ref_of "$tag-2")
daemon DELETE "/v1/workspaces/$ref" '{"prefer": "destroy"}'
q "UPDATE mesh.workspaces SET status = 'acquiring' WHERE run_id = '$tag-2'"
is "$(sweep_did "$tag-2")" workspace_settled "a sweep settles an acquiring row whose backend has nothing"
case "$(row "$tag-2")" in "pending: acquire interrupted: the backend has no sandbox"*) r=0 ;; *) r=1 ;; esac
ok $r "it is pending with the reason: $(row "$tag-2")"
is "$(live "$tag-b")" 0 "and no longer counts as live"
is "$(q "SELECT stdout FROM mesh_exec('$tag-2', ARRAY['echo', 'made'])" 2>/dev/null)" made "the next call makes it again"

# 3. ready, but the backend hibernated it (its daemon stopped): pending, woken by the next call
q "SELECT exit_code FROM mesh_exec('$tag-2', ARRAY['sh', '-c', 'echo kept > f.txt'])" >/dev/null
ref=$(ref_of "$tag-2")
daemon DELETE "/v1/workspaces/$ref" '{"prefer": "hibernate"}'
is "$(sweep_did "$tag-2")" workspace_settled "a sweep settles a ready row whose sandbox is hibernated"
case "$(row "$tag-2")" in "pending: hibernated by the backend"*) r=0 ;; *) r=1 ;; esac
ok $r "it is pending: $(row "$tag-2")"
is "$(live "$tag-b")" 0 "a hibernated sandbox counts as nothing running"

# 4. pending, but the sandbox runs (an acquire whose answer was lost): ready
daemon PUT "/v1/workspaces/$ref"
is "$(sweep_did "$tag-2")" workspace_settled "a sweep settles a pending row whose sandbox runs"
is "$(row "$tag-2")" "ready: the backend runs its sandbox (an acquire whose answer was lost; found by the reaper)" \
   "it is ready again"
is "$(q "SELECT stdout FROM mesh_exec('$tag-2', ARRAY['cat', 'f.txt'])" 2>/dev/null)" kept "with its files"
is "$(sweep_did "$tag-2")" "" "a second sweep finds nothing more to do"

# 5. a row that failed while its sandbox exists: the sweep releases the sandbox
q "UPDATE mesh.workspaces SET status = 'failed', status_reason = 'failed by the test' WHERE run_id = '$tag-2'"
is "$(sweep_did "$tag-2")" released "a sweep releases the sandbox of a failed row"
is "$(q "SELECT release_outcome FROM mesh.workspaces WHERE run_id = '$tag-2'")" destroyed "recorded destroyed"
curl -sf --max-time 10 --unix-socket "$SOCK" "http://localhost/v1/workspaces/$ref" >/dev/null
ok $((! $?)) "the backend no longer has it"
done_testing
