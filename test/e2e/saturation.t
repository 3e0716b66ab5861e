#!/usr/bin/env bash
# A saturated worker says so instead of failing at random: with mesh.worker_max_calls
# calls in progress on a worker, a further call of another run waits in the worker's
# queue, asleep and cancellable (statement_timeout ends the wait, and the command then
# never runs), and a call that can wait runs once a slot frees.
. "$(dirname "$0")/lib.sh"
plan 8
out=$(mktemp -d)
export PGOPTIONS="-c client_min_messages=warning"
q "ALTER SYSTEM SET mesh.worker_max_calls = 1" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 1                                   # the workers read the file at their next turn

# three runs owned by one worker (handoff.c: hash of run_id modulo mesh.workers)
worker_of() { q "SELECT (hashtext('$1')::bigint & 4294967295) % current_setting('mesh.workers')::int"; }
runs=(); w0=$(worker_of "sat-$$-0")
for i in $(seq 0 60); do
  [ "$(worker_of "sat-$$-$i")" = "$w0" ] && runs+=("sat-$$-$i")
  [ ${#runs[@]} -eq 3 ] && break
done
a=${runs[0]}; b=${runs[1]}; c=${runs[2]}
for r in "$a" "$b" "$c"; do
  q "SELECT 1 FROM mesh_acquire('$r', 'sat', 'sam')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$r', ARRAY['true'])" >/dev/null   # materialized
done

psql -X -qAt -c "SELECT stdout FROM mesh_exec('$a', ARRAY['sh', '-c', 'sleep 3; echo a'])" > "$out/a" 2>&1 &
pa=$!
wait_for "SELECT count(*) = 1 FROM mesh.execs WHERE run_id = '$a' AND status = 'running'"
ok $? "run a's command is running: the worker is at mesh.worker_max_calls = 1"

err=$(psql -X -qAt -c "SET statement_timeout = '500ms'" -c "SELECT stdout FROM mesh_exec('$b', ARRAY['touch', 'b-ran'])" 2>&1)
is "$err" "ERROR:  canceling statement due to statement timeout" "run b waits in the queue and statement_timeout ends the wait"

psql -X -qAt -c "SELECT stdout FROM mesh_exec('$c', ARRAY['echo', 'c'])" > "$out/c" 2>&1 &
pc=$!
wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%mesh_exec(''$c''%' AND wait_event = 'Extension' AND pid <> pg_backend_pid()"
ok $? "run c's caller sleeps while it waits for a slot (no busy loop)"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$c'")" 1 "run c's command has not started while a's runs"
wait $pa; wait $pc
is "$(cat "$out/a")" a "run a's command finished"
is "$(cat "$out/c")" c "run c's call ran once a's finished"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$b'")" 1 "run b's command never ran: its caller had left"
is "$(q "SELECT stdout FROM mesh_exec('$b', ARRAY['sh', '-c', 'test -e b-ran && echo ran || echo absent'])")" absent \
   "and left no trace in its workspace"

q "ALTER SYSTEM RESET mesh.worker_max_calls" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 1
q "SELECT mesh_release('$a'), mesh_release('$b'), mesh_release('$c')" >/dev/null
rm -rf "$out"
done_testing
