#!/usr/bin/env bash
# The isolate backend (mesh-isolated, src/isolated/) and mesh_eval, end to end from SQL:
#  - an evaluation returns its value, console output and input; each has a fresh isolate;
#  - it cannot read files, spawn processes, read the environment or reach a host (the host
#    itself, listening: the positive control is curl reaching it), and the denial is recorded;
#  - an infinite loop is stopped by its wall time (its process is killed: none of it is left
#    running), a 4 GB allocation fails and a heap that grows without end is stopped, while
#    another evaluation running at the same time completes; output over its bound is stopped;
#  - shell work is refused up front: mesh_exec on a run of an eval-only agent is refused before
#    the backend is asked (the run stays unmaterialized), and on a run that evaluated, too;
#  - mesh_eval on a run whose backend lacks eval is refused by capability.
. "$(dirname "$0")/lib.sh"
RUNTIME=${MESH_ISOLATE_HOME:-/usr/local/lib/mesh-isolated}
[ -x "$RUNTIME/mesh-isolated" ] || skip_all "mesh-isolated not installed (src/isolated/install.sh)"
plan 22
port=$((MESH_PORT + 70))
log=$(mktemp)
# the host with its defaults: each evaluation's process bounded to 1 GiB
"$RUNTIME/mesh-isolated" "$port" 4 > "$log" 2>&1 &
host=$!
trap 'kill $host 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null && break; sleep 0.1; done

q "SELECT mesh.backend_add('iso-t', 'isolate', '{\"url\": \"http://127.0.0.1:$port\"}', catalog_order => 90)" >/dev/null 2>&1 ||
  q "SELECT mesh.backend_enable('iso-t')" >/dev/null
q "SELECT mesh.agent_set('iso-agent', 'iso-t')" >/dev/null
q "SELECT 1 FROM mesh_acquire('iso-1', 'iso-agent', 'ivy')" >/dev/null
q "SELECT 1 FROM mesh_acquire('iso-2', 'iso-agent', 'ivy')" >/dev/null
ev() { psql -X -qAt -F'|' -c "SELECT value, error IS NULL, status FROM mesh_eval('iso-1', 'javascript', \$c\$$1\$c\$ ${2:+, $2})" 2>&1 | grep -v '^NOTICE:'; }

is "$(ev 'console.log("hi"); return input.a * 2' "'{\"a\": 21}'")" '42|t|ok' "value from input"
is "$(q "SELECT stdout FROM mesh_eval('iso-1', 'javascript', 'console.log(\"hi\", 1)')")" 'hi 1' "console output comes back"
ev 'globalThis.leak = 5; return 1' >/dev/null
is "$(ev 'return globalThis.leak ?? "fresh"')" '"fresh"|t|ok' "each evaluation has a fresh isolate"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'return Deno.readTextFileSync(\"/etc/passwd\")')")" 'NotCapable.*read access' "no file can be read"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'return new Deno.Command(\"/bin/true\").outputSync().code')")" 'NotCapable.*run access' "no process can be spawned"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'return Deno.env.get(\"PATH\")')")" 'NotCapable.*env access' "the environment cannot be read"
curl -sf "http://127.0.0.1:$port/v1/health" >/dev/null; ok $? "control: the host's port is reachable from here"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'return (await fetch(\"http://127.0.0.1:$port/v1/health\")).status')")" 'NotCapable.*net access' "no host can be reached"
is "$(q "SELECT detail->>'host' || ':' || (detail->>'port') FROM mesh.events WHERE kind = 'egress_denied' AND run_id = 'iso-1' ORDER BY id DESC LIMIT 1")" "127.0.0.1:$port" "the denial is recorded as an egress_denied event"

# bounds: a loop and a 4 GB allocation, each beside an evaluation that must complete
psql -X -qAt -c "SELECT status, error FROM mesh_eval('iso-1', 'javascript', 'while (true) {}', NULL, '2 seconds')" > "$log.loop" 2>&1 &
loop=$!
psql -X -qAt -c "SELECT error FROM mesh_eval('iso-2', 'javascript', 'const b = new Uint8Array(4e9); b.fill(1); return b.length', NULL, '20 seconds')" > "$log.bomb" 2>&1 &
bomb=$!
sleep 0.3
is "$(psql -X -qAt -c "SELECT value FROM mesh_eval('iso-2', 'javascript', 'return 6 * 7')" 2>&1)" 42 "an evaluation completes while a loop and a memory bomb run"
wait $loop $bomb
# a stopped evaluation's process is gone: only the host's spares (idle) remain under it
busy=$(ps -o stat= --ppid "$host" | grep -c "^R")
is "$busy" 0 "no process of the stopped loop is left running"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'const a = []; for (;;) a.push(new Array(1e6).fill(1))', NULL, '30 seconds')")" 'memory over' "a heap that grows without end is stopped at the evaluation's memory bound"
like "$(cat "$log.loop")" '^timeout\|evaluation stopped: wall time' "the infinite loop is stopped by its wall time"
like "$(cat "$log.bomb")" 'RangeError: Array buffer allocation failed' "the 4 GB allocation fails in its isolate"
is "$(ev 'return 1')" '1|t|ok' "the host still evaluates after both"
like "$(q "SELECT error FROM mesh_eval('iso-1', 'javascript', 'for (;;) console.log(\"x\".repeat(1000))')")" 'output over' "output over its bound is stopped"
rm -f "$log.loop" "$log.bomb"
# a run whose first call evaluates is told so, not that a sandbox is being set up
q "SELECT 1 FROM mesh_acquire('iso-5', 'iso-agent', 'ivy')" >/dev/null
notice=$(psql -X -qAt -c "SELECT value FROM mesh_eval('iso-5', 'javascript', 'return 1')" 2>&1 | grep '^NOTICE:')
like "$notice" 'run "iso-5" evaluates on backend "iso-t": no sandbox is set up' "the first evaluation's notice says no sandbox is set up"

# routing by capability: shell work refused before the backend is asked
like "$(psql -X -qAt -c "SELECT exit_code FROM mesh_exec('iso-2', ARRAY['true'])" 2>&1)" 'cannot run commands.*shell capability' "mesh_exec on an evaluating run is refused by capability"
q "SELECT 1 FROM mesh_acquire('iso-3', 'iso-agent', 'ivy')" >/dev/null
like "$(psql -X -qAt -c "SELECT exit_code FROM mesh_exec('iso-3', ARRAY['true'])" 2>&1)" 'cannot run commands.*shell capability' "mesh_exec on a new run of an eval-only agent is refused"
is "$(q "SELECT status || ':' || coalesce(external_ref, 'none') FROM mesh.workspaces WHERE run_id = 'iso-3'")" 'pending:none' "and nothing was materialized for it"
# the other way: a run on a backend with shell but no eval
q "SELECT 1 FROM mesh_acquire('iso-4', 'iso-shell', 'ivy')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('iso-4', ARRAY['true'])")" 0 "control: the default backend runs the command"
like "$(psql -X -qAt -c "SELECT value FROM mesh_eval('iso-4', 'javascript', 'return 1')" 2>&1)" 'cannot evaluate snippets.*eval capability' "mesh_eval on a backend without eval is refused by capability"

q "SELECT mesh_release(r) FROM unnest(ARRAY['iso-1','iso-2','iso-4','iso-5']) r" >/dev/null
q "SELECT mesh.agent_set('iso-agent', NULL)" >/dev/null 2>&1
q "SELECT mesh.backend_disable('iso-t')" >/dev/null 2>&1
done_testing
