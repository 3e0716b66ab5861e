#!/usr/bin/env bash
# A mesh worker killed with SIGKILL mid-exec: the server restarts the pool, the
# caller gets a clear error, no exec row is left running, and the pool serves again.
. "$(dirname "$0")/lib.sh"
plan 9
out=$(mktemp -d)
run=kill-$$

q "SELECT 1 FROM mesh_acquire('$run', 'agent-k', 'alice')" >/dev/null
q "SELECT exit_code FROM mesh_exec('$run', ARRAY['true'])" >/dev/null
psql -X -qAt -c "SELECT * FROM mesh_exec('$run', ARRAY['sh', '-c', 'echo up > started; exec sleep 6'])" \
  > "$out/caller.out" 2> "$out/caller.err" &
caller=$!
# the command itself runs in the sandbox, not only its row: the kill comes after the backend call
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = '$run' AND status = 'running')
          AND convert_from(mesh_read_file('$run', 'started'), 'UTF8') = E'up\\n'"
ok $? "the long exec is running in the sandbox"

worker=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' LIMIT 1")
kill -9 "$worker"
wait "$caller"; rc=$?
ok $((rc == 0)) "the caller's statement failed (exit $rc)"
# The crash restart also stops the embedded daemon, which ends its commands: a worker that
# outlives the daemon by a moment (the postmaster signals one process after another) tells its
# caller, and records, that the backend ended the command or could no longer be reached.
grep -qiE 'terminating connection|server closed the connection|mesh worker .* exited|was interrupted: backend .* ended it|cannot be reached' \
  "$out/caller.err"
ok $? "the caller was told why: $(head -1 "$out/caller.err")"

wait_server_ready
wait_for "SELECT count(*) = $(q "SHOW mesh.workers") FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
ok $? "the worker pool is back"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM mesh.execs WHERE status = 'running')"
ok $? "no exec row is left running"
# a command that ran has its row, whatever crashed: the row was durable before the command was sent
row=$(q "SELECT status || ': ' || coalesce(error, '(no reason)') FROM mesh.execs
          WHERE run_id = '$run' AND argv[1] = 'sh' ORDER BY id DESC LIMIT 1")
[[ "$row" == "error: interrupted"* || "$row" == "error: backend \""*"\" cannot be reached"* ]]
ok $? "the interrupted exec is recorded as failed with a reason: ${row:-no row}"

wait_daemon_ready
is "$(q "SELECT stdout FROM mesh_exec('$run', ARRAY['echo', 'alive'])")" alive "the run's workspace is usable again"
q "SELECT mesh_release('$run')" >/dev/null

# Again, the kill as soon as the exec row can be seen: the row is in the WAL files before the
# request leaves (the crash restart this kill causes drops only WAL buffers), so whatever the
# kill interrupts, a command that ran in the sandbox has its row.
run2=kill2-$$
q "SELECT 1 FROM mesh_acquire('$run2', 'agent-k', 'alice')" >/dev/null
q "SELECT exit_code FROM mesh_exec('$run2', ARRAY['true'])" >/dev/null
psql -X -qAt -c "SELECT * FROM mesh_exec('$run2', ARRAY['sh', '-c', 'echo up > started; exec sleep 6'])" \
  > /dev/null 2>&1 &
caller=$!
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = '$run2' AND status = 'running')" 200
kill -9 "$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' LIMIT 1")"
wait "$caller"
wait_server_ready
wait_for "SELECT count(*) = $(q "SHOW mesh.workers") FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
wait_daemon_ready
ran=$(q "SELECT convert_from(mesh_read_file('$run2', 'started'), 'UTF8')" 2>/dev/null)
rows=$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run2' AND argv[1] = 'sh'")
# (a kill before the flush loses the row of a command never sent: nothing ran, nothing to record)
[ -z "$ran" ] || [ "$rows" = 1 ]
ok $? "a command that ran in the sandbox has its exec row (ran: ${ran:-no}; rows: $rows)"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run2' AND status = 'running'")" 0 \
   "and it is not left running"
q "SELECT mesh_release('$run2')" >/dev/null
rm -rf "$out"
done_testing
