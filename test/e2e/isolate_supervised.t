#!/usr/bin/env bash
# The embedded isolate host (mesh.embedded_isolated, src/isolated_launcher.c), on a short-lived
# cluster of its own with small bounds:
#  - the extension starts mesh-isolated on loopback with the settings' bounds, and CREATE
#    EXTENSION registers it as the enabled backend "isolate" (after "local" in catalog order);
#  - killed mid-evaluation, the host's whole process group goes (no process of the evaluation
#    is left running), the exec row says the host went away, the supervisor restarts it and the
#    next evaluation works;
#  - routing by capability: an unpinned agent's run that evaluates goes to the isolate backend
#    (never to a shell sandbox), and is then refused commands; a run that ran a command is
#    refused evaluations; with no backend declaring eval enabled, nothing is materialized;
#  - egress: in open mode an evaluation gets no network; under an allowlist policy its process
#    may reach exactly the policy's domains (the runtime's permission list, seen on its command
#    line and asked from inside), and a host outside it is denied and recorded;
#  - mesh.isolate_cpu_time stops a busy loop with a clear error (its wall time far away), and
#    mesh.isolate_max_isolates refuses an evaluation over it with too_many_isolates.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
RUNTIME=${MESH_ISOLATE_HOME:-/usr/local/lib/mesh-isolated}
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start a cluster as postgres"
[ -x "$RUNTIME/mesh-isolated" ] || skip_all "mesh-isolated not installed (src/isolated/install.sh)"
plan 24
port=$((MESH_PORT + 71))
dir=$(mktemp -d /tmp/mesh-isolated.XXXXXX); chmod 755 "$dir"
trap 'mesh_cluster_stop "$dir/pg"; rm -rf "$dir"' EXIT
mesh_cluster_start "$dir/pg" "mesh.embedded_sandboxd = on" "mesh.workers = 2" "mesh.embedded_isolated = on" \
  "mesh.isolate_port = $port" "mesh.isolate_home = '$RUNTIME'" "mesh.isolate_cpu_time = 3" \
  "mesh.isolate_max_isolates = 2" >/dev/null 2>&1
export PGHOST=$dir/pg
mesh_wait_embedded "$dir/pg" >/dev/null 2>&1 && q "CREATE EXTENSION mesh_exec" >/dev/null && mesh_wait_workers ||
  { echo "Bail out! the cluster did not start"; exit 1; }
log=$dir/pg/server.log
# host_pid: the pid of the host the supervisor started last
host_pid() { grep -o "started mesh-isolated (pid [0-9]*" "$log" | tail -1 | grep -o '[0-9]*$'; }
# host_up: the host answers on its port (bounded wait, 10 s)
host_up() {
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null && return 0; sleep 0.1; done
  return 1
}
# running_in_group PGID: processes of that group that are not zombies
running_in_group() { ps -o stat= -g "$1" 2>/dev/null | grep -vc '^Z'; }

is "$(q "SELECT driver || ':' || enabled || ':' || config::text || ':' || (catalog_order > (SELECT catalog_order FROM mesh.backends WHERE name = 'local'))
           FROM mesh.backends WHERE name = 'isolate'")" 'isolate:true:{"embedded": true}:true' \
  "CREATE EXTENSION registers the embedded host as backend isolate, after local"
host_up; ok $? "the supervisor started mesh-isolated on 127.0.0.1:$port"
first=$(host_pid)
tr '\0' ' ' < "/proc/$first/cmdline" | grep -q "isolated.ts $port 2 2 1024 3"
ok $? "with the settings' bounds (isolates, spares, memory MB, CPU s)"
q "SELECT mesh.agent_set('sup-agent', 'isolate')" >/dev/null
q "SELECT 1 FROM mesh_acquire('sup-1', 'sup-agent', 'ivy')" >/dev/null
is "$(q "SELECT value FROM mesh_eval('sup-1', 'javascript', 'return 6 * 7')" 2>/dev/null)" 42 "an evaluation runs on it"
q "SELECT 1 FROM mesh_acquire('sup-0', 'plain-agent', 'ivy')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('sup-0', ARRAY['true'])")" 0 "an unpinned agent's run still gets the shell backend"

# --- the host killed with an evaluation in it ---
psql -X -qAt -c "SELECT value FROM mesh_eval('sup-1', 'javascript', 'while (true) {}', NULL, '60 seconds')" > "$dir/inflight" 2>&1 &
inflight=$!
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = 'sup-1' AND status = 'running')" 100
ok $? "an evaluation is in flight"
busy_before=$(running_in_group "$first")
kill -9 "$first"
wait $inflight
like "$(cat "$dir/inflight")" 'isolate host went away during the evaluation' "the caller is told the host went away"
is "$(q "SELECT status || ':' || (error LIKE '%isolate host went away%') FROM mesh.execs WHERE run_id = 'sup-1' ORDER BY id DESC LIMIT 1")" \
  'error:true' "and the exec row says so"
sleep 0.3
busy_after=$(running_in_group "$first")
[ "$busy_before" -gt 1 ] && [ "$busy_after" -eq 0 ]
ok $? "no process of the killed host's group is left running (before the kill: $busy_before, after: $busy_after)"
host_up && [ "$(host_pid)" != "$first" ]
ok $? "the supervisor started a new host"
grep -q "mesh-isolated (pid $first) exited with status -9; restarting" "$log"
ok $? "and logged why"
is "$(q "SELECT value FROM mesh_eval('sup-1', 'javascript', 'return 6 * 7')" 2>/dev/null)" 42 "the next evaluation works"

# --- routing by capability ---
q "SELECT 1 FROM mesh_acquire('route-1', 'plain-agent', 'ivy')" >/dev/null
is "$(q "SELECT value FROM mesh_eval('route-1', 'javascript', 'return 6 * 7')" 2>/dev/null)" 42 "an unpinned agent's run evaluates"
is "$(q "SELECT string_agg(run_id || ':' || backend_kind, ',' ORDER BY run_id) FROM mesh.workspaces WHERE run_id IN ('sup-0', 'route-1')")" \
  'route-1:isolate,sup-0:local' "on the isolate backend, where its agent's commands run on local (control)"
like "$(psql -X -qAt -c "SELECT exit_code FROM mesh_exec('route-1', ARRAY['true'])" 2>&1)" 'cannot run commands.*shell capability' \
  "a run that evaluated is refused commands by capability"
like "$(psql -X -qAt -c "SELECT value FROM mesh_eval('sup-0', 'javascript', 'return 1')" 2>&1)" 'cannot evaluate snippets.*eval capability' \
  "a run that ran a command is refused evaluations by capability"
q "SELECT mesh.backend_disable('isolate')" >/dev/null
q "SELECT 1 FROM mesh_acquire('route-2', 'plain-agent', 'ivy')" >/dev/null
out=$(psql -X -qAt -c "SELECT value FROM mesh_eval('route-2', 'javascript', 'return 1')" 2>&1)
is "$(echo "$out" | grep -c 'cannot evaluate snippets'):$(q "SELECT status || ':' || coalesce(external_ref, 'none') FROM mesh.workspaces WHERE run_id = 'route-2'")" \
  '1:pending:none' "with no eval backend enabled, an evaluation is refused and nothing is materialized"
q "SELECT mesh.backend_enable('isolate')" >/dev/null

# --- egress: the run's policy is the evaluation's permission list ---
netq='return (await Deno.permissions.query({name: "net", host: "api.github.com"})).state + "," + (await Deno.permissions.query({name: "net", host: "evil.example.org"})).state'
is "$(q "SELECT value #>> '{}' FROM mesh_eval('sup-1', 'javascript', \$c\$$netq\$c\$)")" 'prompt,prompt' \
  "in open mode an evaluation may reach no host"
q "SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\", \"domains\": [\"api.example.com\"]}')" >/dev/null
q "SELECT 1 FROM mesh_acquire('net-1', 'sup-agent', 'ivy')" >/dev/null
is "$(q "SELECT value #>> '{}' FROM mesh_eval('net-1', 'javascript', \$c\$$netq\$c\$)")" 'granted,prompt' \
  "under an allowlist it may reach the policy's domains (a built-in one here) and no other"
psql -X -qAt -c "SELECT value FROM mesh_eval('net-1', 'javascript', 'await new Promise((r) => setTimeout(r, 3000)); return 1')" >/dev/null 2>&1 &
slow=$!
args=""
for _ in $(seq 1 50); do
  args=$(ps -o args= -g "$(host_pid)" | grep isolate_child | grep -o -- '--allow-net=[^ ]*' | head -1)
  [ -n "$args" ] && break; sleep 0.1
done
like "$args" '^--allow-net=.*\*\.github\.com.*api\.example\.com' "its process's permission list is the run's allowlist, wildcards included"
wait $slow
like "$(q "SELECT error FROM mesh_eval('net-1', 'javascript', 'return (await fetch(\"http://127.0.0.1:$port/v1/health\")).status')")" \
  'NotCapable.*net access' "a host outside the allowlist is denied"
is "$(q "SELECT detail->>'host' FROM mesh.events WHERE kind = 'egress_denied' AND run_id = 'net-1' ORDER BY id DESC LIMIT 1")" \
  127.0.0.1 "and the denial is recorded as an egress_denied event"
q "DELETE FROM mesh.egress_settings" >/dev/null

# --- bounds ---
is "$(q "SELECT error FROM mesh_eval('sup-1', 'javascript', 'while (true) {}', NULL, '60 seconds')" 2>&1)" \
  'evaluation stopped: CPU time over 3 s' "mesh.isolate_cpu_time stops a busy loop (wall time 60 s)"
q "SELECT 1 FROM mesh_acquire('sup-2', 'sup-agent', 'ivy')" >/dev/null
q "SELECT 1 FROM mesh_acquire('sup-3', 'sup-agent', 'ivy')" >/dev/null
psql -X -qAt -c "SELECT error FROM mesh_eval('sup-2', 'javascript', 'while (true) {}')" >/dev/null 2>&1 &
a=$!
psql -X -qAt -c "SELECT error FROM mesh_eval('sup-3', 'javascript', 'while (true) {}')" >/dev/null 2>&1 &
b=$!
wait_for "SELECT count(*) = 2 FROM mesh.execs WHERE run_id IN ('sup-2', 'sup-3') AND status = 'running'" 100
like "$(psql -X -qAt -c "SELECT value FROM mesh_eval('sup-1', 'javascript', 'return 1')" 2>&1)" \
  'too_many_isolates.*2 evaluations already run' "an evaluation over mesh.isolate_max_isolates is refused, saying why"
wait $a $b
q "SELECT mesh_release(r) FROM unnest(ARRAY['sup-0','sup-1','sup-2','sup-3','route-1','route-2','net-1']) r" >/dev/null
done_testing
