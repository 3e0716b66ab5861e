#!/usr/bin/env bash
# Resumable conversations on the embedded default (mesh_resume, sql/src/15_lifecycle.sql): turn 1
# of a conversation writes files and is hibernated while idle; turn 2 resumes it and finds turn 1's
# files without making them again, on the same sandbox, and ownership moved in one transaction
# (turn 1's row ends, resumed_by turn 2; one live row names the sandbox; the old run's sweep does
# not touch it).  Every refusal falls back to a fresh workspace with a NOTICE saying exactly why:
# already resumed, another role's run, another agent's run, a destroyed workspace, a live one.
# A positive control after the refusals: the same workspace, refused to others, resumes for its owner.
. "$(dirname "$0")/lib.sh"
plan 19
t=res-$$
rb=res_b_$$
q "CREATE ROLE $rb LOGIN IN ROLE mesh_harness" >/dev/null
out() { q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c', \$m\$$2\$m\$])" 2>/dev/null; }
# hibernate RUN: idle past a one-second timeout, then the reaper's sweep hibernates it
hibernate() {
  q "SELECT mesh.run_set_budget('$1', idle_timeout => '1 second')" >/dev/null
  sleep 1.5
  q "SELECT count(*) FROM mesh.sweep()" >/dev/null
  q "SELECT mesh.run_set_budget('$1', idle_timeout => '1 hour')" >/dev/null
}
ws() { q "SELECT $2 FROM mesh.workspaces WHERE run_id = '$1'"; }

# turn 1: a "clone" and a build output, then hibernated while idle
q "SELECT 1 FROM mesh_acquire('$t-1', '$t-agent', 'ann')" >/dev/null
out "$t-1" 'mkdir -p repo/.git build && echo main > repo/.git/HEAD && echo built > build/out && echo 1 > clones' >/dev/null
hibernate "$t-1"
is "$(ws "$t-1" "status || '/' || status_reason_code")" "pending/hibernated_idle" "turn 1 is hibernated while idle"

# turn 2 resumes it
notice=$(q "SELECT 1 FROM mesh_acquire('$t-2', '$t-agent', 'ann')" 2>&1 >/dev/null;
         psql -X -qAt -c "SELECT mesh_resume('$t-2', '$t-1')" 2>&1)
like "$notice" "run \"$t-2\" resumes the hibernated workspace of run \"$t-1\"" "mesh_resume says it resumes turn 1's workspace"
like "$notice" "^t$" "and returns true"
first=$(q "SELECT stdout FROM mesh_exec('$t-2', ARRAY['sh', '-c', 'cat repo/.git/HEAD build/out clones'])" 2>&1)
like "$first" "NOTICE:  mesh: run \"$t-2\" resumes the hibernated workspace of run \"$t-1\": waking it on backend \"local\"" \
     "turn 2's first call says whose workspace it wakes"
is "$(echo "$first" | grep -v NOTICE | xargs)" "main built 1" "turn 2 finds turn 1's clone and build output, cloned once"
is "$(ws "$t-1" "status || '/' || release_outcome || '/' || resumed_by")" "released/hibernated/$t-2" \
   "turn 1's row ended: released by hibernation, resumed_by turn 2"
is "$(q "SELECT count(*) FILTER (WHERE w.release_outcome IS NULL) || '/' || count(*) FROM mesh.workspaces w
          WHERE w.external_ref = (SELECT external_ref FROM mesh.workspaces WHERE run_id = '$t-2')")" "1/2" \
   "both rows name the same sandbox, one of them live (turn 2, resume_of turn 1)"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(out "$t-2" 'cat build/out')" built "the sweep leaves the sandbox turn 1 handed over alone"
like "$(q "SELECT 1 FROM mesh_exec('$t-1', ARRAY['true'])" 2>&1)" "released" "turn 1 itself cannot drive it any more"
is "$(q "SELECT mesh_release('$t-1', 'the harness cleans turn 1 up')" 2>&1)/$(out "$t-2" 'cat build/out')" "already released/built" \
   "turn 1's own release afterwards destroys nothing: turn 2 still has the files"

# refusals: each a fresh workspace with the reason
q "SELECT 1 FROM mesh_acquire('$t-3', '$t-agent', 'ann')" >/dev/null
like "$(q "SELECT mesh_resume('$t-3', '$t-1')" 2>&1)" "fresh workspace: the workspace of run \"$t-1\" was already resumed by run \"$t-2\"" \
     "a second resume of turn 1 is refused: turn 2 already took it"
like "$(q "SELECT mesh_resume('$t-3', '$t-2')" 2>&1)" "fresh workspace: the workspace of run \"$t-2\" is ready, not hibernated" \
     "a live workspace is never shared by two runs"
is "$(out "$t-3" 'ls build 2>/dev/null | wc -l')" 0 "the refused run got a fresh, empty workspace"
hibernate "$t-2"
psql -X -qAt -U "$rb" -c "SELECT 1 FROM mesh_acquire('$t-4', '$t-agent-b', 'bob')" >/dev/null
like "$(psql -X -qAt -U "$rb" -c "SELECT mesh_resume('$t-4', '$t-2')" 2>&1)" "fresh workspace: there is no run \"$t-2\" this role may resume" \
     "another role cannot take the workspace over (nor learn the run exists)"
like "$(psql -X -qAt -U "$rb" -c "SELECT mesh.workspace_resume('$t-4', '$t-2', (SELECT oid FROM pg_roles WHERE rolname = '$PGUSER'))" 2>&1)" \
     "permission denied for function workspace_resume" "nor call the state change itself, naming the owner's role"
q "SELECT 1 FROM mesh_acquire('$t-5', '$t-other', 'ann')" >/dev/null
like "$(q "SELECT mesh_resume('$t-5', '$t-2')" 2>&1)" "fresh workspace: run \"$t-2\" belongs to agent \"$t-agent\", not to agent \"$t-other\"" \
     "another agent's run cannot take it over"
q "SELECT 1 FROM mesh_acquire('$t-6', '$t-agent', 'ann')" >/dev/null
is "$(q "SELECT mesh_resume('$t-6', '$t-2')" 2>/dev/null)/$(out "$t-6" 'cat build/out')" "t/built" \
   "control: the same hibernated workspace resumes for its own role and agent"
q "SELECT mesh_release('$t-3')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$t-7', '$t-agent', 'ann')" >/dev/null
like "$(q "SELECT mesh_resume('$t-7', '$t-3')" 2>&1)" "fresh workspace: the workspace of run \"$t-3\" was destroyed" \
     "a destroyed workspace is not resumed"
like "$(q "SELECT mesh_resume('$t-6', '$t-7')" 2>&1)" "run \"$t-6\" already has a workspace" \
     "a run that already has a workspace cannot resume another's"

for r in 4; do psql -X -qAt -U "$rb" -c "SELECT mesh_release('$t-$r')" >/dev/null 2>&1; done
for r in 5 6 7; do q "SELECT mesh_release('$t-$r')" >/dev/null 2>&1; done
q "DROP OWNED BY $rb; DROP ROLE $rb" >/dev/null 2>&1
done_testing
