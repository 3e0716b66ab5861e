#!/usr/bin/env bash
# bench/resume.sh: turn 2 of a conversation on the embedded default, waking turn 1's hibernated
# workspace (mesh_resume), against a cold create, measured in one run.
#
#   sudo bench/resume.sh [ITERATIONS] [FILES]        (default: 15 2000)
#
# Turn 1 of each of ITERATIONS conversations makes a "clone" of FILES 4 KiB files and is
# hibernated while idle (one sweep for all).  Then, timed in the server, p50:
#   wake  = mesh_acquire of turn 2 + mesh_resume + its first mesh_exec (`test -f` of a clone file):
#           wake-to-first-exec, the files already there;
#   cold  = mesh_acquire of a fresh run + its first mesh_exec of `true` (an empty workspace);
#   clone = cold + making the same FILES files again (what resume saves a turn that needs them).
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-15}
FILES=${2:-2000}
. bench/lib.sh
bench_cluster 2

clone_py="import os, sys
n = int(sys.argv[1]); b = b'x' * 4096
for i in range(n):
    d = 'repo/d%d' % (i // 256)
    if i % 256 == 0: os.makedirs(d, exist_ok=True)
    with open('%s/f%d' % (d, i), 'wb') as f: f.write(b)"

# turn 1 of each conversation: the clone, then hibernation while idle
psql -X -qAt -v ON_ERROR_STOP=1 <<SQL >/dev/null
SET client_min_messages = warning;
DO \$\$
BEGIN
  FOR i IN 1..$ITER LOOP
    PERFORM mesh_acquire('t1-' || i, 'bench', 'bench');
    PERFORM 1 FROM mesh_exec('t1-' || i, ARRAY['python3', '-c', \$p\$$clone_py\$p\$, '$FILES']);
    PERFORM mesh.run_set_budget('t1-' || i, idle_timeout => '1 second');
  END LOOP;
END \$\$;
SQL
sleep 1.5
psql -X -qAt -c "SELECT count(*) FROM mesh.sweep()" >/dev/null
hib=$(psql -X -qAt -c "SELECT count(*) FROM mesh.workspaces WHERE run_id LIKE 't1-%' AND status_reason_code = 'hibernated_idle'")
[ "$hib" = "$ITER" ] || { echo "only $hib of $ITER turn-1 workspaces hibernated"; exit 1; }

# p50 ms of ITER turn starts; $1: wake, cold or clone
p50() {
  psql -X -qAt -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
CREATE TEMP TABLE lat (ms float8);
DO \$\$
DECLARE t0 timestamptz; rc int; run text;
BEGIN
  FOR i IN 1..$ITER LOOP
    run := '$1-' || i;
    t0 := clock_timestamp();
    PERFORM mesh_acquire(run, 'bench', 'bench');
    IF '$1' = 'wake' THEN
      IF NOT mesh_resume(run, 't1-' || i) THEN RAISE EXCEPTION 'turn 2 did not resume'; END IF;
      COMMIT;  -- the move is the workers' to see: mesh_resume's row locks end with its transaction
      SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['test', '-f', 'repo/d0/f0']);
    ELSIF '$1' = 'clone' THEN
      SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['python3', '-c', \$p\$$clone_py\$p\$, '$FILES']);
    ELSE
      SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
    END IF;
    IF rc <> 0 THEN RAISE EXCEPTION 'turn start failed (%)', rc; END IF;
    INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
    PERFORM mesh_release(run);
  END LOOP;
END \$\$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) FROM lat;
SQL
}
wake=$(p50 wake); cold=$(p50 cold); clone=$(p50 clone)
printf '%-40s %10s\n' "turn start (p50 of $ITER)" ms
printf '%-40s %10s\n' "wake-to-first-exec (mesh_resume)" "$wake" "cold create, first exec" "$cold" \
       "cold create + clone of $FILES files" "$clone"
awk -v w="$wake" -v c="$cold" -v k="$clone" \
  'BEGIN { printf "wake / cold create: %.2fx; wake / cold create + clone: %.2fx\n", w / c, w / k }'
