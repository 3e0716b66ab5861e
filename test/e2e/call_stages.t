#!/usr/bin/env bash
# mesh.call_stages() under many concurrent calls: the stages of a call (hand-off, the worker's
# own transactions and WAL flush, HTTP, reply) are disjoint intervals of its wait, so they add
# up to at most its total, whatever else the worker does meanwhile.  A worker serves many calls
# in one loop; time it spends on another call (its transactions, its HTTP) counted in this one
# would overlap this call's HTTP and push the sum past the total.  No timing is judged: only
# that the parts fit in the whole, and that every call is counted once.
. "$(dirname "$0")/lib.sh"
plan 6
CLIENTS=6 EXECS=8
out=$(mktemp -d)

for c in $(seq $CLIENTS); do
  q "SELECT 1 FROM mesh_acquire('stages-$$-$c', 'agent-stages', 'stages')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('stages-$$-$c', ARRAY['true'])" >/dev/null   # materialized
done
q "SELECT mesh.call_stages_reset()" >/dev/null
for c in $(seq $CLIENTS); do
  # each session: a declaration (no HTTP), then execs of a command that writes output
  psql -X -qAt -v ON_ERROR_STOP=1 \
    -c "SELECT 1 FROM mesh_acquire('stages-$$-$c', 'agent-stages', 'stages')" \
    -c "DO \$\$ BEGIN FOR i IN 1..$EXECS LOOP
          PERFORM mesh_exec('stages-$$-$c', ARRAY['sh', '-c', 'seq 1 200']); END LOOP; END \$\$" \
    > "$out/$c.out" 2>&1 &
done
wait
is "$(cat "$out"/*.out | grep -cv '^1$')" 0 "$CLIENTS concurrent sessions ran their calls without error"

is "$(q "SELECT calls FROM mesh.call_stages() WHERE op = 'exec' AND stage = 'total'")" \
   $((CLIENTS * EXECS)) "every concurrent exec is counted once"
is "$(q "SELECT calls FROM mesh.call_stages() WHERE op = 'acquire' AND stage = 'total'")" \
   "$CLIENTS" "every concurrent declaration is counted once"
# fits OP: the sum of the op's stages and its total, then whether the sum fits in the total
fits() {
  q "SELECT round(sum(total_ms) FILTER (WHERE stage <> 'total')::numeric, 3) || ' of ' ||
            round(sum(total_ms) FILTER (WHERE stage = 'total')::numeric, 3) || ' ms',
            sum(total_ms) FILTER (WHERE stage <> 'total') <= sum(total_ms) FILTER (WHERE stage = 'total')
       FROM mesh.call_stages() WHERE op = '$1'"
}
exec_fit=$(fits exec); echo "# exec stages: $exec_fit"
is "${exec_fit##*|}" t "the stages of concurrent execs fit in their total (no overlap, nothing counted twice)"
acq_fit=$(fits acquire); echo "# acquire stages: $acq_fit"
is "${acq_fit##*|}" t "the stages of concurrent declarations fit in their total"
is "$(q "SELECT bool_and(total_ms > 0) FROM mesh.call_stages()
           WHERE op = 'exec' AND stage IN ('http', 'worker_txn')")" t \
   "an exec's time is found both in HTTP and in the worker's transactions"

q "SELECT mesh_release(run_id) FROM mesh.workspaces WHERE run_id LIKE 'stages-$$-%'" >/dev/null
rm -rf "$out"
done_testing
