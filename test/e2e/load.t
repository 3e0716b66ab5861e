#!/usr/bin/env bash
# Correct under concurrent load, on the embedded default: a whole harness turn per
# pgbench transaction (acquire a fresh run, write a file, three execs, read the file
# back, release) at 16 clients for a bounded time, then the same through a real
# driver (psycopg2, threads).  Every answer is checked inside the turn against what
# the turn itself sent (test/lib/turn.pgbench, test/lib/turns.py), so one answer
# from another request fails the run.  Afterwards every workspace is released, a
# sweep finds nothing to fix, no broker directory is left, and a clean server stop
# with live sandboxes leaves no process of the cluster behind.
. "$(dirname "$0")/lib.sh"
LIB=$(cd "$(dirname "$0")/../lib" && pwd)
PY=/usr/bin/python3                 # Debian's, which has python3-psycopg2 (test/lib/deps.sh)
SECONDS_PGBENCH=${MESH_LOAD_SECONDS:-20}
SECONDS_DRIVER=${MESH_LOAD_DRIVER_SECONDS:-10}
plan 17
out=$(mktemp -d)
agent=load-$$; py_agent=load-py-$$; live_agent=load-live-$$
export PGOPTIONS="-c client_min_messages=warning"   # one set-up NOTICE per turn otherwise
psql -X -q -v ON_ERROR_STOP=1 -f "$LIB/turn.sql" || exit 1
q "SELECT count(*) FROM mesh.sweep()" >/dev/null   # settle what earlier tests left

# what a set of runs left behind: workspaces not released, execs not ok
not_released() { q "SELECT count(*) FROM mesh.workspaces WHERE agent_id = '$1' AND status <> 'released'"; }
execs_not_ok() { q "SELECT count(*) FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id WHERE w.agent_id = '$1' AND e.status <> 'ok'"; }

# --- 1. pgbench, 16 clients
pgbench -n -M extended -f "$LIB/turn.pgbench" -D agent="$agent" -c 16 -j 4 -T "$SECONDS_PGBENCH" > "$out/pgbench.out" 2> "$out/pgbench.err"
rc=$?
turns=$(awk -F'[:/ ]+' '/^number of transactions actually processed/ {print $6}' "$out/pgbench.out")
ok $rc "pgbench ran 16 clients for ${SECONDS_PGBENCH} s and no client aborted"
grep -m3 -E 'aborted|ERROR' "$out/pgbench.err" | sed 's/^/#   /'
echo "# pgbench: ${turns:-0} turns, $(awk '/^tps/ {print $3}' "$out/pgbench.out") turns/s"
ok "$([ "${turns:-0}" -gt 16 ]; echo $?)" "every client completed turns"
is "$(grep -c 'harness turn:' "$out/pgbench.err")" 0 "every answer belonged to its own turn (echo, cat, env, read back)"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE agent_id = '$agent'")" "$turns" "one workspace per turn"
is "$(not_released "$agent")" 0 "every workspace was released"
is "$(q "SELECT count(*) FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id WHERE w.agent_id = '$agent'")" \
   "$((turns * 3))" "three exec rows per turn"
is "$(execs_not_ok "$agent")" 0 "every exec ended ok"

# --- 2. the same through psycopg2, one thread and connection per client
"$PY" "$LIB/turns.py" 16 "$SECONDS_DRIVER" "$py_agent" > "$out/driver.json" 2> "$out/driver.err"
ok $? "psycopg2: 16 threads for ${SECONDS_DRIVER} s, no error, every answer its own"
sed 's/^/# /' "$out/driver.json" "$out/driver.err" | head -5
is "$(not_released "$py_agent")" 0 "every driver workspace was released"
is "$(execs_not_ok "$py_agent")" 0 "every driver exec ended ok"

# --- 3. nothing to fix, nothing left
is "$(q "SELECT string_agg(action || ' ' || coalesce(run_id, ''), ', ') FROM mesh.sweep() WHERE action <> 'reconciled'")" "" \
   "a sweep finds nothing to fix: no lost exec, no orphan sandbox, no lost workspace"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE agent_id IN ('$agent', '$py_agent') AND status <> 'released'")" 0 \
   "the sweep released nothing of the load runs either"
left=0
for ref in $(q "SELECT external_ref FROM mesh.workspaces WHERE agent_id IN ('$agent', '$py_agent')"); do
  [ -e "$PGDIR/data/mesh_broker/$ref" ] && left=$((left + 1))
done
is "$left" 0 "no broker directory of a released workspace is left"

# --- 4. a clean stop with live sandboxes leaves no process of the cluster
for r in 1 2 3; do
  q "SELECT 1 FROM mesh_acquire('$live_agent-$r', '$live_agent', 'pgbench')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$live_agent-$r', ARRAY['true'])" >/dev/null
done
# every process of the cluster, as pid:start-time (so a reused pid is not mistaken for one)
cluster_processes() {
  local pm; pm=$(head -1 "$PGDIR/data/postmaster.pid")
  ps -eo pid=,ppid= | awk -v root="$pm" '
    { parent[$1] = $2 } END {
      for (p in parent) { q = p; while (q != "" && q != root && q > 1) q = parent[q]; if (q == root) print p }
      print root }' |
  while read -r p; do [ -r "/proc/$p/stat" ] && echo "$p:$(awk '{print $22}' "/proc/$p/stat")"; done
}
before=$(cluster_processes)
holders=$(pgrep -f "^/usr/bin/bwrap .*$PGDIR/data/" | wc -l)
ok "$([ "$holders" -ge 3 ]; echo $?)" "three live sandboxes hold a bwrap process each before the stop ($holders)"
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }
as_postgres pg_ctl -D "$PGDIR/data" -w -t 60 -m fast stop >/dev/null
sleep 1
survivors=""
for entry in $before; do
  p=${entry%%:*}
  # still there, the same process, and not a zombie waiting for a parent outside the cluster
  [ "$(awk '$3 != "Z" {print $22}' "/proc/$p/stat" 2>/dev/null)" = "${entry#*:}" ] && \
    survivors="$survivors [$p] $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-80)"
done
is "$survivors" "" "after pg_ctl stop -m fast no process that belonged to the cluster remains"
is "$(pgrep -f "$PGDIR/data/" | wc -l)" 0 "no bwrap holder, no mesh-sandboxd names the data directory"
as_postgres pg_ctl -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null
wait_server_ready && wait_daemon_ready
wait_for "SELECT count(*) = current_setting('mesh.workers')::int FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
is "$(q "SELECT count(*) FROM (SELECT mesh_release('$live_agent-' || r) FROM generate_series(1, 3) r) x")" 3 \
   "after the restart the live runs are released"
q "DROP FUNCTION mesh_turn_expect(text, text, text)" >/dev/null
rm -rf "$out"
done_testing
