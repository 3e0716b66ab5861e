#!/usr/bin/env bash
# bench/lib.sh: what every benchmark starts from (source it from the checkout's root).
# bench_cluster WORKERS: build and install, then a throwaway cluster with the embedded
# daemon and WORKERS mesh workers, the extension created; WORK is its directory, and the
# cluster is stopped on exit.
bench_cluster() {
  bash test/lib/deps.sh
  make -s >/dev/null && make -s install >/dev/null
  . test/lib/cluster.sh
  WORK=$(mktemp -d /tmp/mesh-bench.XXXXXX); chmod 755 "$WORK"
  trap 'mesh_cluster_stop "$WORK/pg"' EXIT
  mesh_cluster_start "$WORK/pg" "mesh.embedded_sandboxd = on" "mesh.workers = $1"
  mesh_wait_embedded "$WORK/pg"
  psql -X -q -c "CREATE EXTENSION mesh_exec"
  mesh_wait_workers
}
