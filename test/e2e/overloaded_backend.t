#!/usr/bin/env bash
# A backend with no room says so, and the caller gets one clear error: a stand-in
# mesh-sandboxd on a unix socket answers every request with the protocol's
# 503 out_of_resources (docs/protocol.md); the first call of a run pinned to it fails
# with SQLSTATE 53000 and a hint that says what to do, the workspace goes back to pending,
# and the same run succeeds once the backend has room.
. "$(dirname "$0")/lib.sh"
plan 6
dir=$(mktemp -d /tmp/mesh-full.XXXXXX); chmod 755 "$dir"
stand_in "$dir/full.sock" <<'PY'
import json

class Handler(QuietHTTPHandler):
    def answer(self):
        body = json.dumps({"error": {"code": "out_of_resources",
                                     "message": "as many workspaces run as the open-files limit allows"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_PUT = do_POST = do_DELETE = answer
PY
fake=$!
trap 'kill $fake 2>/dev/null; rm -rf "$dir"' EXIT
be=full-$$; run=full-run-$$

stand_in_run "$be" "$dir/full.sock" "$run" olga
err=$(psql -X -q -v VERBOSITY=verbose -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
      -c "SELECT exit_code FROM mesh_exec('$run', ARRAY['true'])" 2>&1)
echo "$err" | sed 's/^/# /'
ok "$(echo "$err" | grep -q "^ERROR:  53000: setting up the workspace of run \"$run\" failed on backend \"$be\""; echo $?)" \
   "a backend with no room fails the call with SQLSTATE 53000"
ok "$(echo "$err" | grep -q "^DETAIL:  backend \"$be\" answered HTTP 503 out_of_resources"; echo $?)" \
   "the detail keeps the backend's own words"
ok "$(echo "$err" | grep -q '^HINT:  The backend has no room for this: prepare its host as the message says, or release workspaces'; echo $?)" \
   "the hint says what to do"
is "$(q "SELECT status FROM mesh.workspaces WHERE run_id = '$run'")" pending "the workspace goes back to pending, holding nothing: the next call tries again"

# the backend has room again: the same run materializes on it
kill $fake; wait $fake 2>/dev/null
q "SELECT mesh.backend_configure('$be', '{\"embedded\": true}')" >/dev/null
is "$(q "SELECT stdout FROM mesh_exec('$run', ARRAY['echo', 'room'])" 2>/dev/null)" room "once there is room the same run's call succeeds"
is "$(q "SELECT mesh_release('$run')")" destroyed "and it is released"
q "SELECT mesh.backend_disable('$be')" >/dev/null
done_testing
