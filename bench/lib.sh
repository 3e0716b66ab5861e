#!/usr/bin/env bash
# bench/lib.sh: what every benchmark starts from (source it from the checkout's root).
#
# bench_cluster WORKERS [CONF...]: build and install, then a throwaway cluster with the
# embedded daemon and WORKERS mesh workers (and the postgresql.conf lines CONF), the extension
# created; WORK is its directory, and the cluster is stopped on exit (after the command
# BENCH_ON_EXIT names, if any).
#
# As root the cluster runs as `postgres` after the host set-up (cgroups, a filesystem of
# its own for workspaces), as test/run.sh does.  As a developer who is not root it runs as
# that user with no host set-up: nothing to install (the PostgreSQL that pg_config names
# must be writable, or already hold this build), no cgroup limits, and the workspace files
# on a tmpfs of their own (/dev/shm), since the embedded daemon refuses to put them on the
# data directory's filesystem (docs/sandboxd.md, disk_unbounded).
bench_cluster() {
  bash test/lib/deps.sh
  make -s >/dev/null
  bench_install
  . test/lib/cluster.sh
  [ "$(id -u)" -eq 0 ] || mesh_host_setup() { bench_workspaces_on_tmpfs "$@"; }
  WORK=$(mktemp -d /tmp/mesh-bench.XXXXXX); chmod 755 "$WORK"
  trap 'bench_stop' EXIT
  mesh_cluster_start "$WORK/pg" "mesh.embedded_sandboxd = on" "mesh.workers = $1" "${@:2}"
  mesh_wait_embedded "$WORK/pg"
  psql -X -q -c "CREATE EXTENSION mesh_exec"
  mesh_wait_workers
}

# bench_median_ms BACKEND KIND ITERATIONS: median ms of mesh_exec(... true) for agent
# bench-BACKEND, timed inside the server without the client round trip; KIND warm (one
# materialized workspace) or cold (each a new run: acquisition + first exec, then release)
bench_median_ms() {
  psql -X -qAt -v backend="$1" -v kind="$2" -v n="$3" <<'SQL'
SET client_min_messages = warning;
SELECT set_config('bench.backend', :'backend', false), set_config('bench.kind', :'kind', false),
       set_config('bench.n', :'n', false) \g /dev/null
CREATE TEMP TABLE lat (ms float8);
DO $$
DECLARE
  b text := current_setting('bench.backend');
  cold boolean := current_setting('bench.kind') = 'cold';
  run text; t0 timestamptz; rc int;
BEGIN
  IF NOT cold THEN
    run := 'bench-warm-' || b;
    PERFORM mesh_acquire(run, 'bench-' || b, 'bench');
    SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
  END IF;
  FOR i IN 1..current_setting('bench.n')::int LOOP
    IF cold THEN
      run := format('bench-cold-%s-%s', b, i);
      PERFORM mesh_acquire(run, 'bench-' || b, 'bench');
    END IF;
    t0 := clock_timestamp();
    SELECT exit_code INTO rc FROM mesh_exec(run, ARRAY['true']);
    INSERT INTO lat VALUES (extract(epoch FROM clock_timestamp() - t0) * 1000);
    IF cold THEN PERFORM mesh_release(run); END IF;
  END LOOP;
  IF NOT cold THEN PERFORM mesh_release(run); END IF;
END $$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM lat;
SQL
}

# make install, or, where the PostgreSQL install is not ours to write, a check that it
# already holds this very build (a stale install would measure other code).
bench_install() {
  local lib
  lib=$(pg_config --pkglibdir)
  if [ -w "$lib" ]; then
    make -s install >/dev/null
    return
  fi
  if cmp -s mesh_exec.so "$lib/mesh_exec.so" &&
     cmp -s src/sandboxd/mesh-sandboxd "$(pg_config --bindir)/mesh-sandboxd"; then
    return
  fi
  echo "bench: $lib is not writable and does not hold this build: run 'sudo make install'" \
       "once, or put a PostgreSQL 15 of your own first in PATH (README.md, Performance)" >&2
  return 1
}

# mesh_host_setup for a user who is not root (called between initdb and the server's start):
# the daemon's workspaces directory is a link to a directory on /dev/shm, which is not the
# data directory's filesystem.
bench_workspaces_on_tmpfs() {
  local state="$1/data/mesh_sandboxd"
  BENCH_TMPFS=$(mktemp -d /dev/shm/mesh-bench.XXXXXX)
  mkdir -p "$state"; chmod 711 "$state" "$BENCH_TMPFS"
  ln -s "$BENCH_TMPFS" "$state/workspaces"
  echo "bench: not root: no host set-up (no cgroup limits); workspace files on $BENCH_TMPFS" >&2
}

# At exit: BENCH_ON_EXIT, the cluster stopped, then what the run left outside WORK (its
# tmpfs directory) and WORK itself removed.
bench_stop() {
  ${BENCH_ON_EXIT:-}
  mesh_cluster_stop "$WORK/pg"
  [ -z "${BENCH_TMPFS:-}" ] || rm -rf "$BENCH_TMPFS"
  rm -rf "$WORK"
}

# tree_cpu_ms PID: the CPU time (user + system, in ms) PID and all its live descendants have
# used so far, with what the children they already reaped used: the whole server's cost when
# PID is the postmaster (backends, mesh workers, the embedded daemon and its sandboxes).
tree_cpu_ms() {
  local pids
  pids=$(ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q != "" && q != root && q != 0 && q != 1) q = parent[q]; if (q == root) print p } }')
  # shellcheck disable=SC2086
  (cd /proc && cat $(printf '%s/stat ' $pids) 2>/dev/null) |
    sed 's/^.*) //' | awk -v hz="$(getconf CLK_TCK)" '{ t += $12 + $13 + $14 + $15 } END { printf "%.0f\n", t * 1000 / hz }'
}

# bench_cpu_ms: two figures, the CPU (ms) the whole cluster has used so far (tree_cpu_ms of
# the postmaster) and the part of it that its mesh workers and their children used.
bench_cpu_ms() {
  local pm w workers_ms=0
  pm=$(head -1 "$PGHOST/data/postmaster.pid")
  for w in $(ps --ppid "$pm" -o pid=,args= | awk '/mesh worker/ {print $1}'); do
    workers_ms=$((workers_ms + $(tree_cpu_ms "$w")))
  done
  echo "$(tree_cpu_ms "$pm") $workers_ms"
}

# baseline_holder_cmdline STATE DAEMON_PID DIR: writes DIR/holder-cmdline (NUL-separated, as
# /proc/PID/cmdline has it) and DIR/holder-uid from one bubblewrap holder the daemon started for
# state dir STATE (waiting up to 10 s for one), for the bare-bwrap baseline. Any holder will do:
# every holder of the default tier has the same flags, only its directories differ. Those are
# replaced by DIR/files and DIR/broker, made here, so the baseline keeps running whatever
# happens to the holder's own: a standby's directory is renamed when a workspace adopts it
# (docs/sandboxd.md), a workspace's is removed at its release. DIR must be reachable by the
# sandbox user.
baseline_holder_cmdline() {
  local state=$1 daemon=$2 dir=$3 pid="" uid i
  local -a args
  for _ in $(seq 1 100); do
    pid=$(pgrep -P "$daemon" -x bwrap | head -1)
    [ -n "$pid" ] && mapfile -d '' -t args < "/proc/$pid/cmdline" 2>/dev/null && [ ${#args[@]} -gt 0 ] && break
    sleep 0.1
  done
  [ ${#args[@]} -gt 0 ] || return 1
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  mkdir -p "$dir/files" "$dir/broker" && chmod 711 "$dir" && echo "$uid" > "$dir/holder-uid"
  [ "$(id -u)" -ne 0 ] || chown "$uid" "$dir/files"
  for i in "${!args[@]}"; do
    case "${args[i]}" in "$state"/workspaces/*/files) args[i]="$dir/files" ;; esac
    # the broker directory: the source of --ro-bind SOURCE /run/mesh
    [ "${args[i]}" = /run/mesh ] && [ "$i" -ge 2 ] && [ "${args[i-2]}" = --ro-bind ] && args[i-1]="$dir/broker"
  done
  printf '%s\0' "${args[@]}" > "$dir/holder-cmdline"
}
