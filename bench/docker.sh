#!/usr/bin/env bash
# bench/docker.sh: the docker backend against mesh-sandboxd ("local"), in one run, as ratios.
#
#   sudo bench/docker.sh [WARM_ITERATIONS] [COLD_ITERATIONS]
#
# 1. warm exec: SELECT mesh_exec(... true) in a materialized workspace, median, per backend
# 2. cold acquisition: the first call of a new run (create + start the sandbox, then exec
#    true), median, per backend
# plus the docker CLI's own `docker exec true` and `docker run --rm true` on the same daemon,
# for reference (measured elsewhere on this machine kind: ~95 ms and ~360 ms).
# A private cluster (port $MESH_PORT, default 5511) and a private dockerd, both stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
WARM=${1:-50}
COLD=${2:-10}
export MESH_PORT=${MESH_PORT:-5511}
. bench/lib.sh
. test/lib/docker.sh
BENCH_ON_EXIT=mesh_docker_stop
bench_cluster 2
mesh_docker_start "$WORK/docker"
mesh_docker_image mesh-bench
psql -X -q -v sock="$WORK/docker/docker.sock" >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT mesh.backend_add('docker', 'docker', jsonb_build_object('socket', :'sock', 'image', 'mesh-bench'));
SELECT mesh.agent_set('bench-local', 'local');
SELECT mesh.agent_set('bench-docker', 'docker');
SQL

# cli_ms N CMD...: median wall time of a docker CLI command, in ms
cli_ms() {
  local n=$1; shift
  for _ in $(seq 1 "$n"); do
    local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 ))
  done | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)] / 1000}'
}

local_warm=$(bench_median_ms local warm "$WARM")
docker_warm=$(bench_median_ms docker warm "$WARM")
local_cold=$(bench_median_ms local cold "$COLD")
docker_cold=$(bench_median_ms docker cold "$COLD")
docker run -d --name bench-ref --network none mesh-bench sleep 600 >/dev/null
cli_exec=$(cli_ms "$COLD" docker exec bench-ref true)
cli_run=$(cli_ms "$COLD" docker run --rm --network none mesh-bench true)
docker rm -f bench-ref >/dev/null

echo "warm exec  local (mesh-sandboxd):  ${local_warm} ms (median of $WARM)"
echo "warm exec  docker:                 ${docker_warm} ms (median of $WARM)"
echo "cold first call  local:            ${local_cold} ms (median of $COLD)"
echo "cold first call  docker:           ${docker_cold} ms (median of $COLD)"
echo "docker CLI: exec true ${cli_exec} ms, run --rm true ${cli_run} ms (median of $COLD)"
awk -v d="$docker_warm" -v l="$local_warm" -v c="$cli_exec" 'BEGIN {
  printf "ratio      warm exec docker / local:        %.2fx\n", d / l
  printf "ratio      warm exec docker / docker CLI:   %.2fx\n", d / c }'
awk -v d="$docker_cold" -v l="$local_cold" -v c="$cli_run" 'BEGIN {
  printf "ratio      cold docker / local:             %.2fx\n", d / l
  printf "ratio      cold docker / docker run --rm:   %.2fx\n", d / c }'
