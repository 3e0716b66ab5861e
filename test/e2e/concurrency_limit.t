#!/usr/bin/env bash
# Two runs of one agent at its concurrency limit materialize at the same moment,
# on different workers: exactly one wins, every time.
. "$(dirname "$0")/lib.sh"
rounds=5
plan $((rounds * 2))
out=$(mktemp -d)
q "SELECT mesh.agent_set_budget('racer', max_concurrent_workspaces => 1)" >/dev/null
for r in $(seq 1 $rounds); do
  # pick two run ids that hash to different workers, so the race is real
  a="race-$r-a"; b=""
  for i in $(seq 1 50); do
    cand="race-$r-b$i"
    if [ "$(q "SELECT (hashtext('$a')::bigint & 4294967295) % current_setting('mesh.workers')::int <> (hashtext('$cand')::bigint & 4294967295) % current_setting('mesh.workers')::int")" = t ]; then b=$cand; break; fi
  done
  [ -n "$b" ] || b="race-$r-b"
  q "SELECT 1 FROM mesh_acquire('$a', 'racer', 'liam') a, mesh_acquire('$b', 'racer', 'liam') b" >/dev/null
  psql -X -qAt -c "SELECT exit_code FROM mesh_exec('$a', ARRAY['true'])" > "$out/a" 2>&1 &
  psql -X -qAt -c "SELECT exit_code FROM mesh_exec('$b', ARRAY['true'])" > "$out/b" 2>&1 &
  wait
  won=$(cat "$out/a" "$out/b" | grep -cx 0)
  is "$won" 1 "round $r: exactly one of two racing runs materialized"
  is "$(q "SELECT count(*) FROM mesh.workspaces WHERE run_id IN ('$a','$b') AND status IN ('acquiring','ready')")" 1 \
     "round $r: one live workspace for the agent"
  q "SELECT mesh_release('$a'), mesh_release('$b')" >/dev/null
done
q "SELECT mesh.agent_set_budget('racer')" >/dev/null
rm -rf "$out"
done_testing
