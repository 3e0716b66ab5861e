#!/usr/bin/env bash
# pg_dump round trip (README "Backup and restore"): an install's configuration (backends, their
# credentials, agents, run ownership grants, budgets, policy, egress, environments, secrets)
# and its finished runs' history are in pg_dump's output; its live state (runs not yet
# released, their commands, grants and events, every run token) is not.  Restored with
# psql into a second, fresh cluster (its own port, directory and embedded daemon), the
# configuration is equal, the secrets and credentials are the ones set, no workspace comes back
# live, and the restored install serves a new run with a restored secret.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start a cluster as postgres"
plan 25

SRC_HOST=$PGHOST SRC_PORT=$PGPORT
S=$$   # names of this run's backend, agent, environment and runs: the file can run again
dir=$(mktemp -d "${MESH_TEST_WORK:-/tmp}/mesh-dump.XXXXXX"); chmod 755 "$dir"
DST_DIR=$dir/pg DST_PORT=${MESH_DUMP_PORT:-$((PGPORT + 50))}
cleanup() {
  kill "$stand_in_pid" 2>/dev/null
  MESH_PORT=$DST_PORT mesh_cluster_stop "$DST_DIR"
  rm -rf "$dir"
  # the source keeps no backend of this file's (the stand-in is gone)
  PGHOST=$SRC_HOST PGPORT=$SRC_PORT psql -X -q -c "SELECT mesh_release('dump-live-$S')" \
    -c "DELETE FROM mesh.backends WHERE name = 'dump-remote-$S'" >/dev/null 2>&1
}
trap cleanup EXIT
export PGOPTIONS="-c client_min_messages=warning"   # the set-up NOTICEs
src() { PGHOST=$SRC_HOST PGPORT=$SRC_PORT psql -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }
dst() { PGHOST=$DST_DIR PGPORT=$DST_PORT psql -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }

# a remote backend's stand-in: records the Authorization header of each request, serves none
/usr/bin/python3 - "$dir/auth.log" "$dir/stand_in.port" <<'PY' &
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def answer(self):
        with open(sys.argv[1], "a") as f:
            f.write("%s\n" % self.headers.get("Authorization"))
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "stand-in"}')
    do_GET = do_POST = do_PUT = do_DELETE = answer
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
PY
stand_in_pid=$!
for _ in $(seq 1 100); do [ -s "$dir/stand_in.port" ] && break; sleep 0.1; done
remote_port=$(cat "$dir/stand_in.port")

# --- an install, configured, with a finished run and a live one ---
secret="s3cr3t-dump-$S-0451" credential="backend-credential-$S"
src "DO \$\$ BEGIN
       IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dump_harness') THEN
         CREATE ROLE dump_harness LOGIN IN ROLE mesh_harness;
       END IF; END \$\$;
     SELECT mesh.backend_add('dump-remote-$S', 'sandboxd', '{\"url\": \"http://127.0.0.1:$remote_port\"}', enabled => false,
                             catalog_order => 950);
     SELECT mesh.backend_set_credential('dump-remote-$S', '$credential');
     SELECT mesh.agent_set('dump-agent-$S', default_size => 'small');
     SELECT mesh.agent_set_budget('dump-agent-$S', max_compute_seconds => 900, max_concurrent_workspaces => 7);
     SELECT mesh.agent_grant('dump-agent-$S', 'dump_harness');
     SELECT mesh.run_set_budget('dump-budgeted-$S', max_compute_seconds => 33);
     SELECT mesh.secret_set('dump-agent-$S', 'dump_token', '$secret');
     SELECT mesh.environment_set('dump-env-$S', '[{\"kind\": \"secret\", \"name\": \"dump_token\", \"as\": \"DUMP_TOKEN\"}]')" >/dev/null
ok $? "the source install is configured"
# the instance policy and egress are the install's: saved as they were, put back at the end
policy=$(src "SELECT row_to_json(s) FROM mesh.settings s")
egress=$(src "SELECT policy FROM mesh.egress_settings")
restore_policy() {
  src "UPDATE mesh.settings SET (max_run_lifetime, idle_timeout, max_compute_seconds, run_ownership,
                                 tier_climb_reset_runs, max_background_per_run)
         = (SELECT max_run_lifetime, idle_timeout, max_compute_seconds, run_ownership, tier_climb_reset_runs,
                   max_background_per_run FROM json_populate_record(NULL::mesh.settings, '$policy'))" >/dev/null
  if [ -n "$egress" ]; then src "UPDATE mesh.egress_settings SET policy = '$egress'" >/dev/null
  else src "DELETE FROM mesh.egress_settings" >/dev/null; fi
}
trap 'restore_policy; cleanup' EXIT
src "SELECT mesh.set_policy(max_run_lifetime => '20 hours', tier_climb_reset_runs => 5);
     SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\", \"domains\": [\"dump.example.org\"]}')" >/dev/null

src "SELECT 1 FROM mesh_acquire('dump-done-$S', 'dump-agent-$S', 'dump-actor', environment => 'dump-env-$S')" >/dev/null
done_out=$(src "SELECT stdout FROM mesh_exec('dump-done-$S', ARRAY['sh', '-c', 'echo finished run'])")
src "SELECT mesh_release('dump-done-$S')" >/dev/null
src "SELECT 1 FROM mesh_acquire('dump-live-$S', 'dump-agent-$S', 'dump-actor', environment => 'dump-env-$S')" >/dev/null
src "SELECT 1 FROM mesh_exec('dump-live-$S', ARRAY['true'])" >/dev/null
is "$(src "SELECT status FROM mesh.workspaces WHERE run_id = 'dump-live-$S'")" ready "a live run holds a ready workspace"
is "$(src "SELECT count(*) > 0 FROM mesh.run_tokens WHERE run_id = 'dump-live-$S' AND revoked_at IS NULL")" t \
   "and a live run token"

# --- the dump: roles (pg_dumpall --globals-only) and the database ---
PGHOST=$SRC_HOST PGPORT=$SRC_PORT pg_dumpall --globals-only -f "$dir/globals.sql"
PGHOST=$SRC_HOST PGPORT=$SRC_PORT pg_dump -f "$dir/dump.sql" "$PGDATABASE"
ok $? "pg_dump of the source database runs"
grep -c "$secret" "$dir/dump.sql" | grep -qx 1
ok $? "the secret's value is in the dump once (its row in mesh.secrets): a dump is kept like the database"

# --- a second, fresh cluster: its own port, directory, embedded daemon and cgroup subtree ---
(MESH_PORT=$DST_PORT MESH_DISK_BYTES=${MESH_DISK_BYTES:-536870912} \
   mesh_cluster_start "$DST_DIR" "mesh.embedded_sandboxd = on" "mesh.workers = 2") >/dev/null 2>&1 &&
  mesh_wait_embedded "$DST_DIR" >/dev/null 2>&1 ||
  { echo "Bail out! the second cluster did not start"; exit 1; }
src_cg=$(jq -r .cgroup_name "$PGDIR/data/mesh_sandboxd/host.json" 2>/dev/null)
dst_cg=$(jq -r .cgroup_name "$DST_DIR/data/mesh_sandboxd/host.json")
[ -n "$dst_cg" ] && [ "$src_cg" != "$dst_cg" ]
ok $? "the second cluster's daemon has a cgroup subtree of its own ($dst_cg)"
PGHOST=$DST_DIR PGPORT=$DST_PORT psql -X -q -d postgres -f "$dir/globals.sql" >/dev/null 2>&1
PGHOST=$DST_DIR PGPORT=$DST_PORT psql -X -q -v ON_ERROR_STOP=1 -f "$dir/dump.sql" > "$dir/restore.out" 2>&1
ok $? "the dump restores with psql -v ON_ERROR_STOP=1, without an error"
sed 's/^/# /' "$dir/restore.out" | grep -i error | head -5
(export PGHOST=$DST_DIR PGPORT=$DST_PORT; mesh_wait_workers) >/dev/null 2>&1

# --- configuration: equal ---
config="SELECT json_build_object(
  'backends', (SELECT json_agg(json_build_array(name, driver, enabled, catalog_order, config, max_size) ORDER BY name)
                 FROM mesh.backends),
  'credentials', (SELECT json_agg(json_build_array(backend, md5(credential)) ORDER BY backend) FROM mesh.backend_credentials),
  'agents', (SELECT json_agg(json_build_array(agent_id, backend, default_size, max_compute_seconds,
                                              max_concurrent_workspaces, idle_timeout) ORDER BY agent_id)
               FROM mesh.agents WHERE agent_id LIKE 'dump-%'),
  'agent_roles', (SELECT json_agg(json_build_array(agent_id, role_oid::text, how) ORDER BY agent_id, role_oid::text)
                    FROM mesh.agent_roles WHERE agent_id LIKE 'dump-%'),
  'run_budgets', (SELECT json_agg(json_build_array(run_id, max_compute_seconds) ORDER BY run_id)
                    FROM mesh.run_budgets WHERE run_id LIKE 'dump-%'),
  'settings', (SELECT json_agg(s) FROM mesh.settings s),
  'egress', (SELECT json_agg(policy) FROM mesh.egress_settings),
  'environments', (SELECT json_agg(json_build_array(name, needs) ORDER BY name) FROM mesh.environments
                     WHERE name LIKE 'dump-%'),
  'secrets', (SELECT json_agg(json_build_array(agent_id, name, md5(value), version) ORDER BY agent_id, name)
                FROM mesh.secrets WHERE agent_id LIKE 'dump-%'))"
src_config=$(src "$config") dst_config=$(dst "$config")
is "$dst_config" "$src_config" "the restored configuration equals the source's"
echo "$dst_config" | grep -q '"20:00:00"' && echo "$dst_config" | grep -q 'dump.example.org'
ok $? "including the changed instance policy and the egress allowlist"
is "$(dst "SELECT md5(credential) = md5('$credential') FROM mesh.backend_credentials WHERE backend = 'dump-remote-$S'")" t \
   "the backend credential is restored as set (pg_dump carries credentials)"

# --- live state: not restored; finished runs' history: restored ---
is "$(dst "SELECT count(*) FROM mesh.workspaces WHERE status NOT IN ('released', 'failed') OR released_at IS NULL")" 0 \
   "no restored workspace is live"
is "$(dst "SELECT count(*) FROM mesh.workspaces WHERE run_id = 'dump-live-$S'")" 0 "the live run's workspace is not restored"
is "$(dst "SELECT (SELECT count(*) FROM mesh.execs WHERE run_id = 'dump-live-$S')
              + (SELECT count(*) FROM mesh.grants WHERE run_id = 'dump-live-$S')
              + (SELECT count(*) FROM mesh.events WHERE run_id = 'dump-live-$S')")" 0 \
   "nor its commands, grants or events"
is "$(dst "SELECT count(*) FROM mesh.run_tokens")" 0 "no run token is restored"
is "$(dst "SELECT status || ' ' || release_outcome FROM mesh.workspaces WHERE run_id = 'dump-done-$S'")" \
   "released destroyed" "the finished run's workspace is restored, released"
is "$(dst "SELECT string_agg(o.stdout, '') FROM mesh.execs e, mesh_exec_output(e.id) o WHERE e.run_id = 'dump-done-$S'")" \
   "$done_out" "its command and its stored output are restored"
is "$(dst "SELECT count(*) FROM mesh.events WHERE run_id = 'dump-done-$S'")" \
   "$(src "SELECT count(*) FROM mesh.events WHERE run_id = 'dump-done-$S'")" "and its events"

# --- the restored install works: a new run with the restored agent, environment and secret ---
dst "SELECT 1 FROM mesh_acquire('dump-after-$S', 'dump-agent-$S', 'dump-actor', environment => 'dump-env-$S')" >/dev/null
got=$(dst "SELECT stdout FROM mesh_exec('dump-after-$S', ARRAY['sh', '-c', 'printf %s \"\$DUMP_TOKEN\" | sha256sum | cut -c1-64'])")
is "$got" "$(printf %s "$secret" | sha256sum | cut -c1-64)" "a new run on the restored install gets the restored secret"
is "$(dst "SELECT size FROM mesh.workspaces WHERE run_id = 'dump-after-$S'")" small "with the restored agent's default size"
is "$(dst "SELECT (SELECT id FROM mesh.workspaces WHERE run_id = 'dump-after-$S')
                  > (SELECT id FROM mesh.workspaces WHERE run_id = 'dump-done-$S')")" t \
   "its workspace id follows the restored ones (the sequences are restored)"
dst "SELECT mesh_release('dump-after-$S')" >/dev/null
ok $? "and it releases"

# the restored backend credential is the one the restored install sends (the stand-in serves
# no workspace: the run fails, after its request)
dst "SELECT mesh.backend_enable('dump-remote-$S');
     SELECT mesh.agent_set('dump-pinned-$S', backend => 'dump-remote-$S')" >/dev/null
PGHOST=$DST_DIR PGPORT=$DST_PORT psql -X -qAt -c "SELECT 1 FROM mesh_acquire('dump-pinned-$S', 'dump-pinned-$S', 'dump-actor')" \
  -c "SELECT exit_code FROM mesh_exec('dump-pinned-$S', ARRAY['true'])" >/dev/null 2>&1
grep -qx "Bearer $credential" "$dir/auth.log"
ok $? "the restored install sends the restored backend credential to that backend"

# the custom format, restored by pg_restore into another database of that cluster (serially:
# with -j, PostgreSQL 15's pg_restore loads an exec before its workspace and fails on the key)
PGHOST=$SRC_HOST PGPORT=$SRC_PORT pg_dump -Fc -f "$dir/dump.custom" "$PGDATABASE" &&
  PGHOST=$DST_DIR PGPORT=$DST_PORT createdb mesh_restore_custom &&
  PGHOST=$DST_DIR PGPORT=$DST_PORT pg_restore --exit-on-error -d mesh_restore_custom "$dir/dump.custom" \
    > "$dir/pg_restore.out" 2>&1
ok $? "pg_dump -Fc restores with pg_restore --exit-on-error"
sed 's/^/# /' "$dir/pg_restore.out" | head -5
is "$(PGHOST=$DST_DIR PGPORT=$DST_PORT PGDATABASE=mesh_restore_custom psql -X -qAt -c "$config")" "$src_config" \
   "with the same configuration"

# --- the source is untouched: its live run still runs ---
is "$(src "SELECT exit_code FROM mesh_exec('dump-live-$S', ARRAY['true'])")" 0 "the source's live run still runs"
done_testing
