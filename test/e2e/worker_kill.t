#!/usr/bin/env bash
# A mesh worker killed with SIGKILL mid-exec: the server restarts the pool, the
# caller gets a clear error, no exec row is left running, and the pool serves again.
. "$(dirname "$0")/lib.sh"
plan 7
out=$(mktemp -d)

q "SELECT 1 FROM mesh_acquire('kill-1', 'agent-k', 'alice')" >/dev/null
q "SELECT exit_code FROM mesh_exec('kill-1', ARRAY['true'])" >/dev/null
psql -X -qAt -c "SELECT * FROM mesh_exec('kill-1', ARRAY['sleep', '6'])" > "$out/caller.out" 2> "$out/caller.err" &
caller=$!
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = 'kill-1' AND status = 'running')"
ok $? "the long exec is running"

worker=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' LIMIT 1")
kill -9 "$worker"
wait "$caller"; rc=$?
ok $((rc == 0)) "the caller's statement failed (exit $rc)"
grep -qiE 'terminating connection|server closed the connection|mesh worker .* exited' "$out/caller.err"
ok $? "the caller was told why: $(head -1 "$out/caller.err")"

wait_server_ready
wait_for "SELECT count(*) = $(q "SHOW mesh.workers") FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
ok $? "the worker pool is back"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM mesh.execs WHERE status = 'running')"
ok $? "no exec row is left running"
is "$(q "SELECT status || ': ' || (error LIKE 'interrupted%')::text FROM mesh.execs WHERE run_id = 'kill-1' ORDER BY id DESC LIMIT 1")" \
   "error: true" "the interrupted exec is recorded as failed with a reason"

wait_daemon_ready
is "$(q "SELECT stdout FROM mesh_exec('kill-1', ARRAY['echo', 'alive'])")" alive "the run's workspace is usable again"
q "SELECT mesh_release('kill-1')" >/dev/null
rm -rf "$out"
done_testing
