#!/usr/bin/env bash
# Faults with real processes and real signals: cancel the caller, drop the harness
# connection, restart PostgreSQL, kill mesh-sandboxd -- each during an exec.  After
# each: no exec left running, the exec charged, the command gone from the host, and
# a sweep finds no sandbox that no row explains and no row whose sandbox is gone.
. "$(dirname "$0")/lib.sh"
plan 27
out=$(mktemp -d)

# the command's process on the host (the embedded daemon runs sandboxes as postgres)
command_running() { pgrep -u postgres -f "sleep $1" >/dev/null; }
wait_command_gone() { for _ in $(seq 1 150); do command_running "$1" || return 0; sleep 0.1; done; return 1; }
exec_state() { q "SELECT status || '/' || (charged_seconds IS NOT NULL)::text FROM mesh.execs WHERE argv = ARRAY['sleep','$1']"; }
sweep_is_clean() {
  local bad
  bad=$(q "SELECT action || ' ' || coalesce(run_id, '') || ' ' || coalesce(detail, '') FROM mesh.sweep()
            WHERE action IN ('orphan_released', 'workspace_lost', 'backend_unreachable')")
  [ -z "$bad" ] || echo "$bad" | sed 's/^/# /'
  [ -z "$bad" ]
}
start_exec() {  # start_exec RUN SECONDS: a caller running `sleep SECONDS`, in the background
  psql -X -qAt -c "SELECT status FROM mesh_exec('$1', ARRAY['sleep','$2'])" > "$out/$2.out" 2> "$out/$2.err" &
  wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE argv = ARRAY['sleep','$2'] AND status = 'running')" \
    && for _ in $(seq 1 50); do command_running "$2" && break; sleep 0.1; done
}

q "SELECT 1 FROM mesh_acquire('fault-1', 'agent-f', 'kate')" >/dev/null
q "SELECT exit_code FROM mesh_exec('fault-1', ARRAY['true'])" >/dev/null

# 1. the caller is cancelled (pg_cancel_backend, as Ctrl-C does)
start_exec fault-1 71; caller=$!
command_running 71; ok $? "cancel: the command runs on the host"
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%sleep'',''71%' AND pid <> pg_backend_pid()" >/dev/null
wait $caller
grep -q "canceling statement" "$out/71.err"; ok $? "cancel: the caller got the cancellation"
wait_for "SELECT status = 'cancelled' FROM mesh.execs WHERE argv = ARRAY['sleep','71']"
is "$(exec_state 71)" "cancelled/true" "cancel: the exec is recorded cancelled and charged"
wait_command_gone 71; ok $? "cancel: the command is gone from the host"

# 2. the harness connection drops mid-exec
start_exec fault-1 72; caller=$!
kill -9 $caller; wait $caller 2>/dev/null
wait_for "SELECT status <> 'running' FROM mesh.execs WHERE argv = ARRAY['sleep','72']" 60
ok $? "dropped connection: the exec did not stay running"
is "$(exec_state 72)" "cancelled/true" "dropped connection: recorded cancelled and charged"
wait_command_gone 72; ok $? "dropped connection: the command is gone from the host"

# 3. PostgreSQL restarts mid-exec
start_exec fault-1 73; caller=$!
as_pg() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }
as_pg "$(pg_config --bindir)/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 -m fast restart >/dev/null
wait $caller; rc=$?
ok $((rc == 0)) "restart: the caller's statement failed"
wait_server_ready; wait_daemon_ready
wait_for "SELECT count(*) = current_setting('mesh.workers')::int FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
wait_for "SELECT status <> 'running' FROM mesh.execs WHERE argv = ARRAY['sleep','73']"
ok $? "restart: the exec did not stay running"
state=$(exec_state 73)
[ "$state" = "error/true" ] || [ "$state" = "cancelled/true" ]
ok $? "restart: recorded as interrupted (or cancelled, its caller having gone first) and charged: $state"
wait_command_gone 73; ok $? "restart: the command is gone from the host"
is "$(q "SELECT stdout FROM mesh_exec('fault-1', ARRAY['echo','after-restart'])")" after-restart "restart: the workspace is usable"

# 4. mesh-sandboxd is killed mid-exec and comes back (the supervisor restarts it)
start_exec fault-1 74; caller=$!
daemon=$(pgrep -u postgres -f "mesh-sandboxd --socket $PGDIR" | head -1)
[ -n "$daemon" ]; ok $? "daemon kill: found the embedded daemon (pid $daemon)"
kill -9 "$daemon"
wait $caller; rc=$?
ok $((rc == 0)) "daemon kill: the caller got an error"
grep -q 'backend "local"' "$out/74.err"; ok $? "daemon kill: the error names the backend: $(head -1 "$out/74.err")"
wait_daemon_ready; ok $? "daemon kill: the supervisor started the daemon again"
wait_for "SELECT status <> 'running' FROM mesh.execs WHERE argv = ARRAY['sleep','74']"
is "$(exec_state 74)" "error/true" "daemon kill: recorded as failed and charged"
wait_command_gone 74; ok $? "daemon kill: the command is gone from the host"
is "$(q "SELECT stdout FROM mesh_exec('fault-1', ARRAY['echo','after-daemon'])")" after-daemon "daemon kill: the workspace was re-adopted"

# 5. mesh-sandboxd is stopped mid-exec (SIGTERM, as when the server stops or restarts): it ends
#    the command and answers "killed"; nobody cancelled it, so it is recorded interrupted
start_exec fault-1 75; caller=$!
daemon=$(pgrep -u postgres -f "mesh-sandboxd --socket $PGDIR" | head -1)
kill -TERM "$daemon"
wait $caller; rc=$?
ok $((rc == 0)) "daemon stop: the caller got an error"
grep -q 'was interrupted: backend "local" ended it' "$out/75.err"
ok $? "daemon stop: the error says the backend ended the command: $(head -1 "$out/75.err")"
is "$(q "SELECT status || '/' || (error LIKE 'interrupted: the backend ended%')::text || '/' || (charged_seconds IS NOT NULL)::text
         FROM mesh.execs WHERE argv = ARRAY['sleep','75']")" "error/true/true" \
   "daemon stop: recorded as interrupted (not cancelled) and charged"
wait_command_gone 75; ok $? "daemon stop: the command is gone from the host"
wait_daemon_ready
is "$(q "SELECT stdout FROM mesh_exec('fault-1', ARRAY['echo','after-stop'])")" after-stop "daemon stop: the workspace is usable"

# after all of it
is "$(q "SELECT count(*) FROM mesh.execs WHERE status = 'running'")" 0 "no exec is left running"
sweep_is_clean; ok $? "a sweep finds no unexplained sandbox and no row without its sandbox"
is "$(q "SELECT mesh_release('fault-1')")" destroyed "the run releases cleanly"
rm -rf "$out"
done_testing
