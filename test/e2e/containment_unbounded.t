#!/usr/bin/env bash
# The embedded default on a host nobody prepared (no mesh-sandboxd --setup-host): workspaces
# would share the data directory's filesystem, so none is created; the caller gets a clear
# error that says how to set the host up, and nothing is written under PGDATA for it.
# Runs its own short-lived cluster (unix socket in its own directory).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start a cluster as postgres"
plan 4
. "$(dirname "$0")/../lib/cluster.sh"
DIR=$(mktemp -d /tmp/mesh-unbounded.XXXXXX)
chmod 755 "$DIR"
mesh_host_setup() { return 0; }   # the point: no host set-up
trap 'mesh_cluster_stop "$DIR/pg"; rm -rf "$DIR"' EXIT
mesh_cluster_start "$DIR/pg" "mesh.embedded_sandboxd = on" "mesh.workers = 1" >/dev/null &&
  mesh_wait_embedded "$DIR/pg" && q "CREATE EXTENSION mesh_exec" >/dev/null && mesh_wait_workers ||
  { echo "Bail out! the cluster did not start"; exit 1; }

caps=$(curl -s -m 5 --unix-socket "$DIR/pg/data/mesh_sandboxd/sandboxd.sock" http://l/v1/capabilities)
is "$(echo "$caps" | jq -r '.capabilities.disk_limits')" false "without the set-up the daemon declares disk_limits false"
q "SELECT 1 FROM mesh_acquire('unb-1', 'a', 'b')" >/dev/null
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT status FROM mesh_exec('unb-1', ARRAY['true'])" 2>&1)
echo "$err" | grep -q "ERROR:  53000: .*would share the filesystem of $DIR/pg/data"
ok $? "the first call fails with 53000 naming the filesystem it would fill"
echo "$err" | grep -q "mesh-sandboxd --setup-host postgres --state-dir $DIR/pg/data/mesh_sandboxd"
ok $? "and says how to set the host up"
is "$(ls "$DIR/pg/data/mesh_sandboxd/workspaces" | wc -l)" 0 "no workspace files were created under PGDATA"
done_testing
