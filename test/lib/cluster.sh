#!/usr/bin/env bash
# test/lib/cluster.sh: a throwaway PostgreSQL 15 cluster with mesh_exec preloaded.
# Source it, then: mesh_cluster_start DIR [extra postgresql.conf lines...]; mesh_cluster_stop DIR.
# As root, start also prepares the host for the embedded daemon (mesh_host_setup) and stop
# undoes it.
# The cluster runs as the postgres OS user (initdb refuses root), or as the calling user when
# that is not root, and listens only on a unix socket in DIR; PGHOST/PGPORT/PGUSER/PGDATABASE are exported for psql.
# MESH_PORT (default 5499) and MESH_DATABASE (default mesh_test: the database created, and
# mesh.database) choose the port and the database.

PG_BIN=${PG_BIN:-$(pg_config --bindir)}
MESH_PORT=${MESH_PORT:-5499}
MESH_DATABASE=${MESH_DATABASE:-mesh_test}

as_postgres() {
  if [ "$(id -u)" -ne 0 ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

# The install-time host preparation for the embedded daemon (root only): a cgroup subtree
# delegated to postgres and the workspaces on a filesystem of their own of MESH_DISK_BYTES
# (default 1 GiB), so tiers' limits hold and no workspace can fill the data directory's disk.
mesh_host_setup() {
  local dir=$1
  [ "$(id -u)" -eq 0 ] || { echo "mesh: not root, skipping mesh-sandboxd --setup-host" >&2; return 0; }
  "$PG_BIN/mesh-sandboxd" --setup-host postgres --state-dir "$dir/data/mesh_sandboxd" \
    --disk-bytes "${MESH_DISK_BYTES:-1073741824}" >/dev/null
}

# Undoes mesh_host_setup once the server is stopped: unmounts the workspaces' filesystem,
# deletes its image (preallocated space: test runs must not pile them up) and removes the
# delegated cgroup subtree.
mesh_host_teardown() {
  local dir=$1 state="$1/data/mesh_sandboxd" cg ctl
  [ "$(id -u)" -eq 0 ] || return 0
  cg=$(jq -r '.cgroup_name // empty' "$state/host.json" 2>/dev/null || true)
  { grep -o " $dir/[^ ]*" /proc/mounts || true; } | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -f "$state/workspaces.img"
  [ -n "$cg" ] || return 0
  for ctl in memory pids cpu cpuacct; do
    [ -d "/sys/fs/cgroup/$ctl/$cg" ] || continue
    find "/sys/fs/cgroup/$ctl/$cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
    rmdir "/sys/fs/cgroup/$ctl/$cg" 2>/dev/null || true
  done
  return 0
}

mesh_cluster_start() {
  local dir=$1; shift
  mesh_host_teardown "$dir"
  rm -rf "$dir"; mkdir -p "$dir"; chmod 700 "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres "$dir"
  as_postgres "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >/dev/null
  mesh_host_setup "$dir" || { echo "mesh-sandboxd --setup-host failed" >&2; return 1; }
  {
    echo "shared_preload_libraries = 'mesh_exec'"
    echo "port = $MESH_PORT"
    echo "unix_socket_directories = '$dir'"
    echo "listen_addresses = ''"
    echo "mesh.database = '$MESH_DATABASE'"
    echo "fsync = on"
    echo "log_line_prefix = '%m [%p] %b '"
    for line in "$@"; do echo "$line"; done
  } >> "$dir/data/postgresql.conf"
  as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
  export PGHOST=$dir PGPORT=$MESH_PORT PGUSER=postgres PGDATABASE=$MESH_DATABASE
  as_postgres "$PG_BIN/createdb" -h "$dir" -p "$MESH_PORT" -U postgres "$MESH_DATABASE"
}

mesh_cluster_restart() {
  local dir=$1
  as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 restart >/dev/null
}

mesh_cluster_stop() {
  local dir=$1
  [ -d "$dir/data" ] && as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -w -t 60 -m fast stop >/dev/null 2>&1 || true
  mesh_host_teardown "$dir"
}

# Wait until the embedded daemon answers on its socket (the launcher starts it).
mesh_wait_embedded() {
  local dir=$1 sock="$1/data/mesh_sandboxd/sandboxd.sock"
  for _ in $(seq 1 100); do
    curl -sf --unix-socket "$sock" http://localhost/v1/capabilities >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "embedded mesh-sandboxd did not come up on $sock" >&2
  return 1
}

# Wait until the worker pool is connected (workers retry until mesh.database exists).
mesh_wait_workers() {
  for _ in $(seq 1 100); do
    [ "$(psql -X -qAt -c "SELECT count(*) = current_setting('mesh.workers')::int FROM pg_stat_activity WHERE backend_type = 'mesh worker'" 2>/dev/null)" = t ] && return 0
    sleep 0.1
  done
  echo "the mesh worker pool did not start" >&2
  return 1
}
