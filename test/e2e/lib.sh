#!/usr/bin/env bash
# test/e2e/lib.sh: TAP helpers for end-to-end tests against the cluster test/run.sh started.
# Needs PGHOST, PGPORT, PGUSER, PGDATABASE and PGDIR (the cluster's directory) in the environment.

. "$(dirname "${BASH_SOURCE[0]}")/../lib/holders.sh"
# TAP: test/lib/tap.sh (plan, ok, is, like, skip REASON COUNT, skip_all, diag, done_testing)
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

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

# stand_in_run BACKEND SOCKET RUN ACTOR: backend BACKEND on the stand-in at SOCKET, its agent
# BACKEND-agent pinned to it, and RUN of that agent declared by ACTOR.
stand_in_run() {
  q "SELECT mesh.backend_add('$1', 'sandboxd', '{\"socket\": \"$2\"}', catalog_order => 900)" >/dev/null &&
    q "SELECT mesh.agent_set('$1-agent', backend => '$1')" >/dev/null &&
    q "SELECT 1 FROM mesh_acquire('$3', '$1-agent', '$4')" >/dev/null
}

# stand_in SOCKET: a stand-in backend on unix socket SOCKET, in the background (its pid in
# $!); stdin is Python defining class Handler (a socketserver request handler, or a
# QuietHTTPHandler: http.server's without its request log), which serves each connection on a
# thread of its own.  Returns once the socket is there.
stand_in() {
  local sock=$1 quiet='
import http.server

class QuietHTTPHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
'
  /usr/bin/python3 -c "$quiet$(cat; cat <<'PY'

import os, socketserver, sys

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

server = Server(sys.argv[1], Handler)
os.chmod(sys.argv[1], 0o777)
server.serve_forever()
PY
)" "$sock" &
  for _ in $(seq 1 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  return 1
}
