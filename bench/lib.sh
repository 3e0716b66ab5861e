#!/usr/bin/env bash
# bench/lib.sh: what a benchmark does first.  Source it from the repository root.
#
#   bench_start    build and install mesh_exec, build the fork+exec baseline
#                  (bench/out/forkexec), start a private cluster with the embedded
#                  daemon and 2 workers in $WORK/pg, stopped at exit.

bench_start() {
  bash test/lib/deps.sh
  make -s >/dev/null && make -s install >/dev/null
  mkdir -p bench/out
  cc -O2 -o bench/out/forkexec bench/forkexec.c
  # shellcheck source=test/lib/cluster.sh
  . test/lib/cluster.sh
  WORK=$(mktemp -d /tmp/mesh-bench.XXXXXX); chmod 755 "$WORK"
  trap 'mesh_cluster_stop "$WORK/pg"' EXIT
  mesh_cluster_start "$WORK/pg" "mesh.embedded_sandboxd = on" "mesh.workers = 2"
  mesh_wait_embedded "$WORK/pg"
  psql -X -q -c "CREATE EXTENSION mesh_exec"
  mesh_wait_workers
}
