#!/usr/bin/env bash
# bench/edge.sh: the edge backend, through the Fly.io Sprites API TEST DOUBLE, against
# mesh-sandboxd ("local"), in one run, as ratios.
#
#   sudo bench/edge.sh [WARM_ITERATIONS] [COLD_ITERATIONS]
#
# 1. warm exec: SELECT mesh_exec(... true) in a materialized workspace, median, per backend
# 2. cold first call: a new run's first call (sprite created, then exec true), median
# 3. wake: the first call to a sprite the double put to sleep (the daemon's hibernate: processes
#    stopped, files kept), median, against the warm exec of the same backend.  The double's
#    create and wake delays are 0 here: what is measured is the driver, the double's HTTP hop
#    and the real daemon's work, not a vendor's VM start.
# A private cluster (port $MESH_PORT, default 5513) and a private double, both stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
WARM=${1:-50}
COLD=${2:-5}
export MESH_PORT=${MESH_PORT:-5513}
. bench/lib.sh
BENCH_ON_EXIT=mesh_edge_stop
bench_cluster 2
. test/lib/edge.sh
mesh_edge_start "$WORK/edge"
psql -X -q -v url="$MESH_EDGE_URL" -v tok="$MESH_EDGE_TOKEN_FILE" >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT mesh.backend_add('edge', 'edge', jsonb_build_object('api_url', :'url'));
SELECT mesh.backend_set_credential('edge', trim(pg_read_file(:'tok'), E'\n'));
SELECT mesh.agent_set('bench-local', 'local');
SELECT mesh.agent_set('bench-edge', 'edge');
SQL

local_warm=$(bench_median_ms local warm "$WARM")
edge_warm=$(bench_median_ms edge warm "$WARM")
local_cold=$(bench_median_ms local cold "$COLD")
edge_cold=$(bench_median_ms edge cold "$COLD")

# wake: one run, its sprite put to sleep before each timed call (timed by psql: the client's
# round trip over the unix socket is included, a fraction of a millisecond)
psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-wake', 'bench-edge', 'bench')" >/dev/null
psql -X -qAt -c "SELECT exit_code FROM mesh_exec('bench-wake', ARRAY['true'])" >/dev/null 2>&1
ref=$(psql -X -qAt -c "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'bench-wake'")
times=""
for _ in $(seq 1 "$COLD"); do
  mesh_edge_double "/_double/sleep/$ref" >/dev/null
  t=$(psql -X -qAt -c '\timing on' -c "SELECT exit_code FROM mesh_exec('bench-wake', ARRAY['true'])" 2>/dev/null |
      sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
  times="$times $t"
done
psql -X -qAt -c "SELECT mesh_release('bench-wake')" >/dev/null
edge_wake=$(tr ' ' '\n' <<<"$times" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')

echo "warm exec  local (mesh-sandboxd):  ${local_warm} ms (median of $WARM)"
echo "warm exec  edge (double):          ${edge_warm} ms (median of $WARM)"
echo "cold first call  local:            ${local_cold} ms (median of $COLD)"
echo "cold first call  edge (double):    ${edge_cold} ms (median of $COLD)"
echo "wake: first call to a sleeping sprite ${edge_wake} ms (median of $COLD)"
awk -v e="$edge_warm" -v l="$local_warm" 'BEGIN { printf "ratio      warm exec edge / local:      %.2fx\n", e / l }'
awk -v e="$edge_cold" -v l="$local_cold" 'BEGIN { printf "ratio      cold edge / local:           %.2fx\n", e / l }'
awk -v w="$edge_wake" -v e="$edge_warm" 'BEGIN { printf "ratio      wake / warm exec (edge):     %.2fx\n", w / e }'
