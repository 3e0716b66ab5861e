#!/usr/bin/env bash
# mesh.stat_backends, mesh.stat_backend_latency and mesh.stat_workers under concurrent calls:
# concurrent sessions, their runs spread over the workers, count each call exactly once (atomics, no lost update), the
# failed ones as errors, in the histogram as in the counts, and the workers together count
# every call they ended.  No timing is judged.
. "$(dirname "$0")/lib.sh"
plan 6
CLIENTS=6 EXECS=8
out=$(mktemp -d)

for c in $(seq $CLIENTS); do
  q "SELECT 1 FROM mesh_acquire('statc-$$-$c', 'agent-statc', 'statc')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('statc-$$-$c', ARRAY['true'])" >/dev/null 2>&1   # materialized
done
backend=$(q "SELECT DISTINCT backend_kind FROM mesh.workspaces WHERE run_id LIKE 'statc-$$-%'")
q "SELECT mesh.stat_reset()" >/dev/null
for c in $(seq $CLIENTS); do
  # each session: EXECS commands, and as many reads outside the workspace (refused by the backend)
  psql -X -qAt -v ON_ERROR_STOP=1 \
    -c "DO \$\$ BEGIN FOR i IN 1..$EXECS LOOP
          PERFORM mesh_exec('statc-$$-$c', ARRAY['sh', '-c', 'exit ' || (i % 2)]);
          BEGIN PERFORM mesh_read_file('statc-$$-$c', '/etc/hostname');
          EXCEPTION WHEN insufficient_privilege THEN NULL; END;
        END LOOP; END \$\$" > "$out/$c.out" 2>&1 &
done
wait
is "$(cat "$out"/*.out | wc -l)" 0 "$CLIENTS concurrent sessions ran their calls without an unexpected error"

is "$(q "SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend = '$backend' AND operation = 'exec'")" \
   "$((CLIENTS * EXECS))/0" "every concurrent command is counted once, none as an error (exit 1 is an answer)"
is "$(q "SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend = '$backend' AND operation = 'read_file'")" \
   "$((CLIENTS * EXECS))/$((CLIENTS * EXECS))" "every refused read is counted once, as an error"
is "$(q "SELECT string_agg(l.calls::text || '=' || b.calls::text, ',' ORDER BY l.operation)
           FROM mesh.stat_backend_latency l JOIN mesh.stat_backends b USING (backend, operation)
          WHERE backend = '$backend' AND operation IN ('exec', 'read_file')")" \
   "$((CLIENTS * EXECS))=$((CLIENTS * EXECS)),$((CLIENTS * EXECS))=$((CLIENTS * EXECS))" \
   "the latency histogram holds every one of them"
is "$(q "SELECT p50_time <= p95_time AND p95_time <= p99_time AND p50_time > 0
           FROM mesh.stat_backends WHERE backend = '$backend' AND operation = 'exec'")" t \
   "the percentiles are in order"
calls=$(q "SELECT sum(calls) FROM mesh.stat_workers")
[ "$calls" -ge $((2 * CLIENTS * EXECS)) ]
ok $? "the workers counted every call they ended ($calls >= $((2 * CLIENTS * EXECS)))"

q "SELECT mesh_release(run_id) FROM mesh.workspaces WHERE run_id LIKE 'statc-$$-%'" >/dev/null
rm -rf "$out"
done_testing
