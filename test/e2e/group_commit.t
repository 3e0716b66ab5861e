#!/usr/bin/env bash
# Group commit (mesh.worker_group_commit_delay): concurrent execs' results share WAL flushes,
# and a worker killed while it holds results for a shared flush loses no row a caller was told
# of (docs/design.md, invariant 4).  No timing is asserted: the delay is set wide so that the
# calls meet, and what is counted is flushes (mesh.stat_workers.wal_flushes) and rows.
. "$(dirname "$0")/lib.sh"
plan 7
N=16
out=$(mktemp -d)
trap 'rm -rf "$out"; q "ALTER SYSTEM RESET mesh.worker_group_commit_delay" >/dev/null; q "SELECT pg_reload_conf()" >/dev/null' EXIT
workers=$(q "SHOW mesh.workers")

for i in $(seq 1 $N); do
  q "SELECT 1 FROM mesh_acquire('gc-$$-$i', 'agent-gc', 'alice')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('gc-$$-$i', ARRAY['true'])" >/dev/null
done
q "ALTER SYSTEM SET mesh.worker_group_commit_delay = '100ms'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
is "$(psql -X -qAt -c "SELECT setting FROM pg_settings WHERE name = 'mesh.worker_group_commit_delay'")" 100 \
  "the delay is a setting, reloaded"

# settle: a worker reports its WAL statistics at most once a second, when it is about to sleep
settle() { sleep 1.5; }
settle
q "SELECT pg_stat_reset_shared('wal')" >/dev/null
q "SELECT mesh.stat_reset()" >/dev/null
# a barrier: the callers wait on an advisory lock a session holds, and start together when it ends
psql -X -qAt -c "SELECT pg_advisory_lock(4242)" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
holder=$!
wait_for "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted)" 300
pids=()
for i in $(seq 1 $N); do
  # their results come 20 ms apart: each would have its own flush without the delay
  psql -X -qAt -c "SELECT pg_advisory_lock_shared(4242)" -c "SELECT exit_code FROM mesh_exec('gc-$$-$i', ARRAY['sleep', '0.$(printf %03d $((i * 20)))'])" \
    > "$out/c$i" 2>&1 &
  pids+=($!)
done
wait_for "SELECT count(*) = $N FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted" 600
q "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted" >/dev/null
for p in "${pids[@]}"; do wait "$p"; done
wait "$holder" 2>/dev/null
is "$(grep -h . "$out"/c* | sort | uniq -c | awk '{ print $1 " " $2 }')" "$N 0" "the $N concurrent execs all answered exit 0" ||
  grep -h -A2 ERROR "$out"/c* | head -6 | sed 's/^/# /'
settle
# what is asserted is the workers' own count (mesh.stat_workers.wal_flushes: the flushes their
# turns waited for); pg_stat_wal, every process's, is printed beside it: it also counts the WAL
# writer's flushes and those of any other process at work meanwhile
syncs=$(q "SELECT wal_sync FROM pg_stat_wal")
flushes=$(q "SELECT sum(wal_flushes) FROM mesh.stat_workers")
echo "# $N concurrent execs: the workers waited for $flushes WAL flushes; $syncs in all (pg_stat_wal, the WAL writer's included; $workers workers)"
ok $((flushes >= N)) "$N concurrent execs' calls waited for fewer than $N WAL flushes ($flushes)"

# --- a worker killed while it holds results for a shared flush ------------------------------
# Callers loop on execs; each answer (exec id, output) is noted.  The kill comes amid them,
# with the results of the calls in flight committed or not, flushed or not: every answer a
# caller got must have its row, finished, with what the caller was told.
for i in $(seq 1 $N); do
  (
    for k in $(seq 1 200); do
      r=$(psql -X -qAt -F' ' -c "SELECT exec_id, stdout FROM mesh_exec('gc-$$-$i', ARRAY['echo', 'r$i-$k'])" 2>/dev/null) || break
      echo "$r" >> "$out/answers"
    done
  ) &
  pids+=($!)
done
wait_for "SELECT count(*) >= $N FROM mesh.execs WHERE run_id LIKE 'gc-$$-%' AND argv[1] = 'echo' AND status = 'ok'" 300
worker=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' LIMIT 1")
kill -9 "$worker"
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
wait_server_ready
wait_for "SELECT count(*) = $workers FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
ok $? "the worker pool is back after the kill"
answers=$(wc -l < "$out/answers")
ok $((answers < N)) "callers were answered before the kill ($answers answers)"
# every answer, against its row
awk '{ printf "(%s,\047%s\047)\n", $1, $2 }' "$out/answers" | paste -sd, > "$out/values"
missing=$(q "SELECT count(*) FROM (VALUES $(cat "$out/values")) AS a(id, out)
             WHERE NOT EXISTS (SELECT 1 FROM mesh.execs e
                                WHERE e.id = a.id::bigint AND e.status = 'ok' AND e.stdout = a.out::text || E'\\n')")
is "$missing" 0 "every exec a caller was answered for has its row, ok, with the output it was told ($answers checked)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id LIKE 'gc-$$-%' AND status = 'running')"
ok $? "no exec row is left running"
for i in $(seq 1 $N); do q "SELECT mesh_release('gc-$$-$i')" >/dev/null 2>&1; done
done_testing
