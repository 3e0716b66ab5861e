#!/usr/bin/env bash
# The exec answer's framing, as the worker reads it (docs/protocol.md, output "tail"): a
# stand-in mesh-sandboxd on a unix socket answers each command its own way.  Raw output after
# the JSON line is stored byte for byte (NUL, newlines, invalid UTF-8), as is the older base64
# answer; an answer whose announced lengths do not match the bytes that follow is refused:
# the call fails with a clear error, the exec row says so, and nothing is stored.
. "$(dirname "$0")/lib.sh"
plan 8
dir=$(mktemp -d /tmp/mesh-framing.XXXXXX); chmod 755 "$dir"
stand_in "$dir/framing.sock" <<'PY'
import base64, json

OUT, ERR = b"a\x00b\nc\xff\n", b"\xfe warn\n"

class Handler(QuietHTTPHandler):
    protocol_version = "HTTP/1.1"
    def send(self, body, ctype="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send(json.dumps({"id": self.path.rsplit("/", 1)[1], "status": "running"}).encode())
    def do_DELETE(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send(b'{"outcome": "destroyed"}')
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        doc = {"exit_code": 0, "signal": None, "stdout_bytes": len(OUT) + 100,
               "stderr_bytes": len(ERR), "truncated": True, "wall_ms": 1.0, "cpu_ms": None,
               "timed_out": False, "oom_killed": False, "killed": False, "egress_denials": []}
        how = req["argv"][0]
        if how == "old":
            doc.update(stdout_b64=base64.b64encode(OUT).decode(), stderr_b64=base64.b64encode(ERR).decode())
            self.send(json.dumps(doc).encode())
            return
        doc.update(stdout_kept=len(OUT) + (5 if how == "short" else 0), stderr_kept=len(ERR))
        self.send(json.dumps(doc).encode() + b"\n" + OUT + ERR, "application/vnd.mesh.exec-output")
PY
fake=$!
trap 'kill $fake 2>/dev/null; rm -rf "$dir"' EXIT
be=framing-$$; run=framing-run-$$

stand_in_run "$be" "$dir/framing.sock" "$run" fran
want_out=$(printf 'a\000b\nc\377\n' | xxd -p | tr -d '\n'); want_err=$(printf '\376 warn\n' | xxd -p)

for how in raw old; do
  id=$(q "SELECT exec_id FROM mesh_exec('$run', ARRAY['$how'])" 2>/dev/null)
  is "$(q "SELECT encode(o.data, 'hex') || ' ' || encode(e.data, 'hex')
             FROM mesh_exec_output_bytes($id, 'stdout') o, mesh_exec_output_bytes($id, 'stderr') e")" \
     "$want_out $want_err" "$how answer: both streams stored byte for byte"
done
is "$(q "SELECT stdout_bytes || ' ' || stdout_dropped || ' ' || stderr_bytes FROM mesh.execs WHERE id = $id")" \
   "107 100 7" "the row counts what the command wrote and what was not kept"

err=$(psql -X -q -v VERBOSITY=verbose -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
      -c "SELECT exit_code FROM mesh_exec('$run', ARRAY['short'])" 2>&1)
echo "$err" | sed 's/^/# /'
ok "$(echo "$err" | grep -q "^ERROR: .*backend \"$be\"\|^DETAIL: .*backend \"$be\" answered an exec"; echo $?)" \
   "an answer shorter than its announced output fails the call"
ok "$(echo "$err" | grep -q "^ERROR:  08P01"; echo $?)" "as a protocol violation (08P01), not an internal error"
is "$(q "SELECT status || ' ' || (error LIKE '%output%') FROM mesh.execs WHERE run_id = '$run' ORDER BY id DESC LIMIT 1")" \
   "error true" "the exec row says why"
is "$(q "SELECT count(*) FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id
          WHERE e.run_id = '$run' AND e.status = 'error'")" 0 "nothing of it is stored"
is "$(q "SELECT mesh_release('$run')")" destroyed "the run is released"
q "SELECT mesh.backend_disable('$be')" >/dev/null
done_testing
