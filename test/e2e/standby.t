#!/usr/bin/env bash
# The embedded mesh-sandboxd keeps mesh.embedded_standby sandboxes started ahead of demand (its
# --standby, docs/sandboxd.md "Standby holders"): one by default, which a new run's first call
# adopts instead of waiting for a sandbox to start; a DBA who wants none sets 0 with SQL
# (ALTER SYSTEM, then a restart) and the daemon keeps none, every run still served.
# The setting 0 runs on a short-lived cluster of its own.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/holders.sh"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start a cluster as postgres"
plan 9

# embedded_args DIR: the command line of the cluster in DIR's embedded daemon, one line
embedded_args() {
  local pid
  pid=$(pgrep -f "mesh-sandboxd --socket $1/data/mesh_sandboxd/sandboxd.sock" | head -1)
  [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline"
}
# standbys_settle DIR N: waits (bounded, 10 s) until the daemon of DIR keeps N standbys
standbys_settle() {
  for _ in $(seq 1 100); do
    [ "$(standby_holder_count "$1/data/mesh_sandboxd")" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# --- the default: one, adopted by a new run ---
is "$(q "SHOW mesh.embedded_standby")" 1 "mesh.embedded_standby is 1 by default"
embedded_args "$PGDIR" | grep -q -- "--standby 1 "
ok $? "the embedded daemon is started with --standby 1"
standbys_settle "$PGDIR" 1
ok $? "and keeps one standby sandbox"
q "SELECT 1 FROM mesh_acquire('standby-e2e', 'standby-agent', 'standby-actor')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('standby-e2e', ARRAY['true'])")" 0 "a new run's first call runs"
ref=$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'standby-e2e'")
grep -q "workspace $ref: adopted standby holder" "$PGDIR/server.log"
ok $? "on the standby, which its workspace adopted"
q "SELECT mesh_release('standby-e2e')" >/dev/null

# --- set to 0 with SQL: none kept, runs served the normal way ---
. "$(dirname "$0")/../lib/cluster.sh"
dir=$(mktemp -d /tmp/mesh-standby.XXXXXX); chmod 755 "$dir"
trap 'mesh_cluster_stop "$dir/pg"; rm -rf "$dir"' EXIT
(mesh_cluster_start "$dir/pg" "mesh.embedded_sandboxd = on" "mesh.workers = 1" &&
  PGHOST=$dir/pg q "ALTER SYSTEM SET mesh.embedded_standby = 0" &&
  mesh_cluster_restart "$dir/pg") >/dev/null 2>&1
export PGHOST=$dir/pg
mesh_wait_embedded "$dir/pg" >/dev/null 2>&1 && q "CREATE EXTENSION mesh_exec" >/dev/null && mesh_wait_workers ||
  { echo "Bail out! the cluster did not start"; exit 1; }
embedded_args "$dir/pg" | grep -q -- "--standby 0 "
ok $? "after ALTER SYSTEM SET mesh.embedded_standby = 0 and a restart the daemon gets --standby 0"
grep -q "standby holders: off" "$dir/pg/server.log"
ok $? "and says it keeps none"
q "SELECT 1 FROM mesh_acquire('standby-off', 'standby-agent', 'standby-actor')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('standby-off', ARRAY['true'])")" 0 "a new run is served all the same"
is "$(standby_holder_count "$dir/pg/data/mesh_sandboxd")" 0 "and no standby sandbox runs"
q "SELECT mesh_release('standby-off')" >/dev/null
done_testing
