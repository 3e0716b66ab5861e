#!/usr/bin/env bash
# test/demo.sh: set everything up and run a short harness session you can read.
#
#   test/demo.sh            (as root)
#
# Installs the packages, builds and installs mesh_exec, prepares the host for the
# embedded daemon (mesh-sandboxd --setup-host, test/lib/cluster.sh), starts a local
# PostgreSQL 15 (port 5499, socket in /tmp/mesh-demo) with mesh_exec preloaded
# and its embedded mesh-sandboxd, and runs the harness flow in psql.  The
# server keeps running afterwards; the last lines say how to connect and stop.
set -euo pipefail
cd "$(dirname "$0")/.."
bash test/lib/deps.sh
make -s >/dev/null && make -s install >/dev/null
. test/lib/cluster.sh
DEMO=/tmp/mesh-demo
mesh_cluster_stop "$DEMO"
mesh_cluster_start "$DEMO" "mesh.embedded_sandboxd = on"
mesh_wait_embedded "$DEMO"
mesh_wait_workers

psql -X -e -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION mesh_exec;
-- A harness declares a run's workspace: a row, no sandbox yet.
SELECT run_id, agent_id, created_by_actor_id, status FROM mesh_acquire('demo-run', 'coder', 'alice');
-- The first exec-class call materializes it (NOTICE), then runs the command.
SELECT exit_code, stdout, status FROM mesh_exec('demo-run', ARRAY['uname', '-a']);
SELECT mesh_write_file('demo-run', 'hello.py', convert_to(E'print("hello from the sandbox")\n', 'UTF8'));
SELECT stdout FROM mesh_exec('demo-run', ARRAY['sh', '-c', 'python3 hello.py 2>/dev/null || cat hello.py']);
-- Isolated: no network, no host home, an unprivileged user with no capabilities.
SELECT stdout FROM mesh_exec('demo-run', ARRAY['bash', '-c',
  'id -u; grep CapEff /proc/self/status; ls /root /home 2>&1 | head -2; (echo > /dev/tcp/127.0.0.1/5499) 2>&1 | head -1']);
-- Contained: the size tier's memory, pids and CPU limits hold, and files cannot fill the server's disk.
SELECT size, capabilities->>'resource_limits' AS tier_limits, capabilities->>'disk_limits' AS own_disk FROM mesh.workspaces WHERE run_id = 'demo-run';
-- A background command runs on between calls; its output is stored (and NOTIFYed) as it comes.
SELECT mesh_exec_start('demo-run', ARRAY['sh', '-c', 'for i in 1 2 3; do echo tick $i; sleep 0.2; done']) AS bg \gset
SELECT status, stdout FROM mesh_exec_wait(:bg);
-- Every command is a row.
SELECT exec_id, argv, status, exit_code, round(wall_seconds::numeric, 4) AS wall_s FROM mesh.exec_log WHERE run_id = 'demo-run';
-- Release: the run can no longer reach its workspace.
SELECT mesh_release('demo-run', 'demo finished');
SELECT run_id, status, release_outcome FROM mesh.run_workspaces;
SQL

echo
echo "PostgreSQL with mesh_exec is running:  psql -h $DEMO -p $MESH_PORT -U postgres mesh_test"
echo "stop it (and undo its host set-up) with:  bash -c '. test/lib/cluster.sh; mesh_cluster_stop $DEMO'"
