#!/usr/bin/env bash
# bench/coldstart.sh: the worker-transaction costs of a cold start (acquire -> first exec of
# `true`) and of a warm exec, with the WAL flushes per call (bench/coldstart.sql).
#
#   sudo bench/coldstart.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-50}
. bench/lib.sh
bench_cluster 2
psql -X -q -v iterations="$ITER" -f bench/coldstart.sql | sed 's/^/coldstart /'
