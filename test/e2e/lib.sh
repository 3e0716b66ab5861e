#!/usr/bin/env bash
# test/e2e/lib.sh: TAP helpers for end-to-end tests against the cluster test/run.sh started.
# Needs PGHOST, PGPORT, PGUSER, PGDATABASE and PGDIR (the cluster's directory) in the environment.

TAP_N=0
TAP_FAILED=0
plan() { echo "1..$1"; }
ok() {  # ok CONDITION-EXIT-STATUS DESCRIPTION
  TAP_N=$((TAP_N + 1))
  if [ "$1" -eq 0 ]; then echo "ok $TAP_N - $2"; else echo "not ok $TAP_N - $2"; TAP_FAILED=$((TAP_FAILED + 1)); fi
}
is() {  # is GOT EXPECTED DESCRIPTION
  if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got: '$1'"; echo "#   expected: '$2'"; fi
}
done_testing() { exit $((TAP_FAILED > 0)); }

q() { psql -X -qAt -v ON_ERROR_STOP=1 -c "$1"; }

# wait_for SQL-BOOLEAN [TRIES]: poll until the query returns t (0.1 s apart)
wait_for() {
  local tries=${2:-100}
  for _ in $(seq 1 "$tries"); do
    [ "$(psql -X -qAt -c "$1" 2>/dev/null)" = t ] && return 0
    sleep 0.1
  done
  return 1
}

wait_server_ready() {
  for _ in $(seq 1 300); do
    pg_isready -q -h "$PGHOST" -p "$PGPORT" && psql -X -qAt -c "SELECT 1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# the embedded daemon answers again (it is restarted with the server)
wait_daemon_ready() {
  local sock="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
  for _ in $(seq 1 600); do
    curl -sf --max-time 2 --unix-socket "$sock" http://localhost/v1/capabilities >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# remote_daemon_start: a second mesh-sandboxd run as root on loopback TCP with a bearer
# token, so its workspaces get cgroup limits.  Sets RD_DIR, RD_PORT, RD_TOKEN (RD_DIR/token.pg
# is the token the postgres user may read) and an EXIT trap that destroys what it still
# holds, stops it and removes its cgroup subtree.
remote_daemon_start() {
  RD_DIR=$(mktemp -d /tmp/mesh-e2e-sd.XXXXXX); chmod 711 "$RD_DIR"
  RD_PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  RD_TOKEN="e2e-secret-$RANDOM$RANDOM$RANDOM"
  RD_CGROUP="mesh-e2e-$$"
  echo "$RD_TOKEN" > "$RD_DIR/token"; chmod 600 "$RD_DIR/token"
  cp "$RD_DIR/token" "$RD_DIR/token.pg"; chown postgres "$RD_DIR/token.pg"; chmod 400 "$RD_DIR/token.pg"
  "$(pg_config --bindir)/mesh-sandboxd" --listen "127.0.0.1:$RD_PORT" --token-file "$RD_DIR/token" \
    --state-dir "$RD_DIR/state" --cgroup-name "$RD_CGROUP" 2> "$RD_DIR/log" &
  RD_PID=$!
  trap remote_daemon_stop EXIT
  for _ in $(seq 1 100); do rd_api GET /v1/capabilities >/dev/null && break; sleep 0.1; done
}

# rd_api METHOD PATH: a call to the remote daemon, body on stdout
rd_api() { curl -sf -m 10 -X "$1" -H "Authorization: Bearer $RD_TOKEN" "http://127.0.0.1:$RD_PORT$2"; }

remote_daemon_stop() {   # the daemon keeps workspaces across its own exit: destroy them first
  for id in $(rd_api GET /v1/workspaces \
              | python3 -c 'import json,sys;[print(w["id"]) for w in json.load(sys.stdin)["workspaces"]]' 2>/dev/null); do
    rd_api DELETE "/v1/workspaces/$id" >/dev/null
  done
  kill -TERM "$RD_PID" 2>/dev/null; wait "$RD_PID" 2>/dev/null; rm -rf "$RD_DIR"
  # the daemon leaves its (now empty) cgroup subtree behind: remove it, children first
  for h in /sys/fs/cgroup/*/"$RD_CGROUP"; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
}
