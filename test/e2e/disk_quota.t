#!/usr/bin/env bash
# Per-workspace disk quotas through SQL, on the README's path (the embedded daemon as postgres,
# after mesh-sandboxd --setup-host with its defaults but the image's size): a run that fills its
# workspace gets EDQUOT inside, its exec row's error says disk_quota and the caller a NOTICE,
# while another run on the same host keeps writing; a background command's row says it too;
# removing the files gives the run its room back.
. "$(dirname "$0")/lib.sh"
SOCK="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
caps=$(curl -s -m 5 --unix-socket "$SOCK" http://l/v1/capabilities)
[ "$(echo "$caps" | jq -r .capabilities.disk_quota)" = true ] ||
  skip_all "the embedded daemon has no disk quotas here (no --setup-host, or no btrfs)"
plan 11
limit=$(echo "$caps" | jq -r .tiers.small.disk_bytes)
q "SELECT mesh.agent_set('dq-agent', default_size => 'small')" >/dev/null
for r in dq-full dq-other; do q "SELECT 1 FROM mesh_acquire('$r-$$', 'dq-agent', 'e2e')" >/dev/null; done
# --- one run fills its quota
out=$(psql -X -qAt -v ON_ERROR_STOP=1 -c "SELECT status || '|' || exit_code FROM mesh_exec('dq-full-$$', ARRAY['sh','-c','head -c 4G /dev/zero > fill'])" 2>&1)
is "$(echo "$out" | tail -1)" "ok|1" "the command fails on its own (exit 1) and the exec is ok: the quota is not a kill"
is "$(q "SELECT capabilities->>'disk_quota' FROM mesh.workspaces WHERE run_id = 'dq-full-$$'")" true \
   "the workspace records the daemon's disk_quota capability"
echo "$out" | grep -q "NOTICE:.*reached its disk quota"; ok $? "the caller gets a NOTICE that the workspace reached its disk quota"
row=$(q "SELECT error FROM mesh.execs WHERE run_id = 'dq-full-$$' ORDER BY id DESC LIMIT 1")
case "$row" in disk_quota:*) ok 0 "its exec row's error says disk_quota";; *) ok 1 "its exec row's error says disk_quota"; echo "# got: $row";; esac
is "$(q "SELECT stderr LIKE '%Disk quota exceeded%' FROM mesh.execs WHERE run_id = 'dq-full-$$' ORDER BY id DESC LIMIT 1")" t \
   "the command saw EDQUOT (Disk quota exceeded)"
size=$(q "SELECT stdout FROM mesh_exec('dq-full-$$', ARRAY['stat','-c','%s','fill'])")
ok $(( ! (size > limit - 4 * 1048576 && size <= limit) )) "it holds its quota and no more ($size of $limit bytes)"

# --- another run on the same host keeps writing
is "$(q "SELECT stdout FROM mesh_exec('dq-other-$$', ARRAY['sh','-c','head -c 8M /dev/zero > mine && stat -c %s mine'])")" 8388608 \
   "another run writes 8 MiB while the first is at its quota"
is "$(q "SELECT coalesce(error, 'none') FROM mesh.execs WHERE run_id = 'dq-other-$$' ORDER BY id DESC LIMIT 1")" none \
   "and its exec row has no disk_quota"

# --- a background command's row says it too
id=$(q "SELECT mesh_exec_start('dq-full-$$', ARRAY['sh','-c','echo more >> fill'])")
wait_for "SELECT status <> 'running' FROM mesh.execs WHERE id = $id" 300
row=$(q "SELECT status || '|' || coalesce(error, '-') FROM mesh.execs WHERE id = $id")
case "$row" in ok\|disk_quota:*) ok 0 "a background command in the full workspace: ok, with disk_quota";;
               *) ok 1 "a background command in the full workspace: ok, with disk_quota"; echo "# got: $row";; esac

# --- removing the files gives the room back
q "SELECT exit_code FROM mesh_exec('dq-full-$$', ARRAY['rm','fill'])" >/dev/null
id=$(q "SELECT exec_id FROM mesh_exec('dq-full-$$', ARRAY['sh','-c','echo again > f && cat f'])")
is "$(q "SELECT stdout || '|' || coalesce(error, 'none') FROM mesh.execs WHERE id = $id")" \
   "again
|none" "after rm the run writes again, without disk_quota"
refs=$(q "SELECT string_agg(external_ref, ' ') FROM mesh.workspaces WHERE run_id IN ('dq-full-$$', 'dq-other-$$')")
for r in dq-full dq-other; do q "SELECT mesh_release('$r-$$')" >/dev/null; done
left=0
for ref in $refs; do [ -e "$PGDIR/data/mesh_sandboxd/workspaces/$ref" ] && left=$((left + 1)); done
is "$left" 0 "both workspaces are released and their directories gone (their quota slots back in the pool)"
done_testing
