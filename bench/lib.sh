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

# tree_cpu_ms PID: the CPU time (user + system, in ms) PID and all its live descendants have
# used so far, with what the children they already reaped used: the whole server's cost when
# PID is the postmaster (backends, mesh workers, the embedded daemon and its sandboxes).
tree_cpu_ms() {
  local pids
  pids=$(ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q != "" && q != root && q != 0 && q != 1) q = parent[q]; if (q == root) print p } print root }')
  # shellcheck disable=SC2086
  (cd /proc && cat $(printf '%s/stat ' $pids) 2>/dev/null) |
    sed 's/^.*) //' | awk -v hz="$(getconf CLK_TCK)" '{ t += $12 + $13 + $14 + $15 } END { printf "%.0f\n", t * 1000 / hz }'
}
