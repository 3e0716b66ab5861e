#!/usr/bin/env bash
# Lifecycle honesty (sql/src/15_lifecycle.sql) on the embedded default: each ended row says why
# (end_reason) and when (ended_at); a hibernated workspace gets a retention deadline at its first
# hibernation that a resume carries over unchanged and only mesh_extend moves (recorded, by its
# owner only); the reaper's sweep warns once (event + NOTIFY on mesh_lifecycle) before the
# deadline and destroys the workspace past it (end_reason expired); an expired workspace is not
# resumed.  The deadline is put in the past by hand (as a superuser) rather than waited for.
. "$(dirname "$0")/lib.sh"
plan 19
t=lc-$$
rb=lc_b_$$
q "CREATE ROLE $rb LOGIN IN ROLE mesh_harness" >/dev/null
radm=lc_adm_$$
q "CREATE ROLE $radm LOGIN IN ROLE mesh_admin" >/dev/null
out() { q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c', \$m\$$2\$m\$])" 2>/dev/null; }
hibernate() {
  q "SELECT mesh.run_set_budget('$1', idle_timeout => '1 second')" >/dev/null
  sleep 1.5
  q "SELECT count(*) FROM mesh.sweep()" >/dev/null
  q "SELECT mesh.run_set_budget('$1', idle_timeout => '1 hour')" >/dev/null
}
ws() { q "SELECT $2 FROM mesh.workspaces WHERE run_id = '$1'"; }

# released by its run
q "SELECT 1 FROM mesh_acquire('$t-a', '$t-agent', 'ann')" >/dev/null
out "$t-a" 'true' >/dev/null
is "$(ws "$t-a" "coalesce(end_reason, 'none')")" none "a live workspace has no end reason (control)"
q "SELECT mesh_release('$t-a')" >/dev/null
is "$(ws "$t-a" "end_reason || '/' || (ended_at IS NOT NULL)")" "released/true" "released by its run: end_reason released, with ended_at"

# stopped by its budget
q "SELECT 1 FROM mesh_acquire('$t-b', '$t-agent', 'ann')" >/dev/null
q "SELECT mesh.run_set_budget('$t-b', max_compute_seconds => 0.05)" >/dev/null
out "$t-b" 'sleep 0.3' >/dev/null
out "$t-b" 'true' >/dev/null
is "$(ws "$t-b" "status || '/' || end_reason")" "failed/budget" "stopped by its budget: end_reason budget"

# ended by an administrator: a mesh_admin member releasing another role's run; the run's own
# role releasing its run is 'released' (the control)
as_rb() { psql -X -qAt -U "$rb" -c "$1"; }
as_rb "SELECT 1 FROM mesh_acquire('$t-own', '$t-agent-b', 'bo')" >/dev/null
as_rb "SELECT exit_code FROM mesh_exec('$t-own', ARRAY['true'])" >/dev/null
as_rb "SELECT mesh_release('$t-own')" >/dev/null
is "$(ws "$t-own" "end_reason")" released "released by its own role: end_reason released (control)"
as_rb "SELECT 1 FROM mesh_acquire('$t-adm', '$t-agent-b', 'bo')" >/dev/null
as_rb "SELECT exit_code FROM mesh_exec('$t-adm', ARRAY['true'])" >/dev/null
psql -X -qAt -U "$radm" -c "SELECT mesh_release('$t-adm', 'operator stop')" >/dev/null
is "$(ws "$t-adm" "status || '/' || end_reason || '/' || (ended_at IS NOT NULL)")" "released/admin/true" \
   "released by an administrator: end_reason admin, with ended_at"

# hibernated: a deadline at the first hibernation, carried over by a resume
q "SELECT 1 FROM mesh_acquire('$t-c', '$t-agent', 'ann')" >/dev/null
out "$t-c" 'echo kept > f' >/dev/null
hibernate "$t-c"
is "$(ws "$t-c" "hibernated_until BETWEEN now() + '6 days 23 hours' AND now() + '7 days'")" t \
   "a hibernated workspace's deadline is its first hibernation plus hibernated_retention (7 days)"
deadline=$(ws "$t-c" "hibernated_until")
q "SELECT 1 FROM mesh_acquire('$t-d', '$t-agent', 'ann')" >/dev/null
q "SELECT mesh_resume('$t-d', '$t-c')" >/dev/null 2>&1
is "$(ws "$t-d" "hibernated_until = '$deadline'")/$(ws "$t-c" end_reason)" "t/resumed" \
   "the resume carries the deadline over, not reset; turn 1 ended: resumed"
out "$t-d" 'cat f' >/dev/null
hibernate "$t-d"
is "$(ws "$t-d" "status || '/' || (hibernated_until = '$deadline')")" "pending/true" "waking and hibernating again do not reset it either"

# mesh_extend: the owner only, recorded
like "$(psql -X -qAt -U "$rb" -c "SELECT mesh_extend('$t-d', '1 day')" 2>&1)" "is not declared" "another role cannot extend it"
is "$(q "SELECT mesh_extend('$t-d', '1 day') = '$deadline'::timestamptz + '1 day'")/$(q "SELECT count(*) FROM mesh.events WHERE run_id = '$t-d' AND kind = 'extended'")" \
   "t/1" "mesh_extend moves the deadline by exactly what it asks, recorded as an event"

# the warning: once, an event and a NOTIFY
q "SELECT mesh.set_lifecycle(expiry_warning => '30 days')" >/dev/null
heard=$(psql -X -qAt -c "LISTEN mesh_lifecycle" -c "SELECT count(*) FROM mesh.sweep()" -c "SELECT 1" 2>&1)
like "$heard" "notification .*\"run_id\": \"$t-d\"" "the sweep warns about it with a NOTIFY on mesh_lifecycle"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = '$t-d' AND kind = 'expiry_warning'")" 1 "and an event, once, however many sweeps"
q "SELECT mesh.set_lifecycle(expiry_warning => '1 hour')" >/dev/null

# expired: not resumed; destroyed by the sweep
q "UPDATE mesh.workspaces SET hibernated_until = now() - interval '1 second' WHERE run_id = '$t-d'" >/dev/null
q "SELECT 1 FROM mesh_acquire('$t-e', '$t-agent', 'ann')" >/dev/null
like "$(q "SELECT mesh_resume('$t-e', '$t-d')" 2>&1)" "fresh workspace: the workspace of run \"$t-d\" expired: its retention ended at" \
     "a workspace past its deadline is not resumed"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(ws "$t-d" "status || '/' || release_outcome || '/' || end_reason")" "released/destroyed/expired" \
   "past its deadline, the sweep destroys it: end_reason expired"
like "$(q "SELECT mesh_extend('$t-d', '1 day')" 2>&1)" "has no retention deadline to extend" "an ended workspace cannot be extended"
like "$(q "SELECT mesh_extend('$t-e', '1 day')" 2>&1)" "has no retention deadline to extend \(it is pending\)" \
     "nor one never hibernated"

# a live workspace: mesh_extend moves its run's lifetime bound, and the sweep honours it
q "SELECT 1 FROM mesh_acquire('$t-f', '$t-agent', 'ann')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$t-g', '$t-agent', 'ann')" >/dev/null
out "$t-f" 'true' >/dev/null
out "$t-g" 'true' >/dev/null
is "$(q "SELECT mesh_extend('$t-f', '1 hour') = (SELECT created_at + interval '25 hours' FROM mesh.workspaces WHERE run_id = '$t-f')")/$(q "SELECT detail->>'lifetime_until' IS NOT NULL FROM mesh.events WHERE run_id = '$t-f' AND kind = 'extended'")" \
   "t/t" "mesh_extend of a live workspace moves its run's lifetime bound (24 hours from its creation) by what it asks, recorded"
like "$(psql -X -qAt -U "$rb" -c "SELECT mesh_extend('$t-f', '1 hour')" 2>&1)" "is not declared" "another role cannot extend it"
q "SELECT mesh.set_policy(max_run_lifetime => '1 second')" >/dev/null
sleep 1.5
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
q "SELECT mesh.set_policy(max_run_lifetime => '24 hours')" >/dev/null
is "$(ws "$t-f" status)/$(ws "$t-g" "status || '/' || end_reason")" "ready/released/expired" \
   "past the instance's lifetime the sweep ends the run not extended, and keeps the extended one"

for r in b e f g; do q "SELECT mesh_release('$t-$r')" >/dev/null 2>&1; done
q "DROP OWNED BY $rb; DROP ROLE $rb; DROP OWNED BY $radm; DROP ROLE $radm" >/dev/null 2>&1
done_testing
