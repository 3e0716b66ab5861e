#!/usr/bin/env bash
# The driver runner's deadline (src/runner.c): a backend that accepts requests and never
# answers cannot hold a sweep.  A stand-in on a unix socket reads each request and stays
# silent; mesh.sweep() with a short mesh.reaper_sweep_timeout still returns, reports that
# backend unreachable because it did not answer before the deadline, and still reconciles
# the backend the suite runs on (which comes after it in the sweep's order).
. "$(dirname "$0")/lib.sh"
plan 4
dir=$(mktemp -d /tmp/mesh-hung.XXXXXX); chmod 755 "$dir"
stand_in "$dir/hung.sock" <<'PY'
import socketserver, time

class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.recv(65536)
        time.sleep(600)
PY
fake=$!
be=a-hung-$$
cleanup() {
  q "ALTER SYSTEM RESET mesh.reaper_sweep_timeout" >/dev/null; q "SELECT pg_reload_conf()" >/dev/null
  q "SELECT mesh.backend_disable('$be')" >/dev/null 2>&1
  kill $fake 2>/dev/null; rm -rf "$dir"
}
trap cleanup EXIT

q "SELECT mesh.backend_add('$be', 'sandboxd', '{\"socket\": \"$dir/hung.sock\"}', catalog_order => 901)" >/dev/null
ok $? "a backend that never answers is in the catalog"
q "ALTER SYSTEM SET mesh.reaper_sweep_timeout = '3s'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
sleep 1    # the reaper reads the new setting at its next wake-up

rows=$(q "SELECT action || ' ' || coalesce(backend, '') || ': ' || coalesce(detail, '') FROM mesh.sweep()")
echo "$rows" | sed 's/^/# /'
echo "$rows" | grep -q "^backend_unreachable $be: backend \"$be\" did not answer before the deadline"
ok $? "the sweep gave up on the silent backend at its deadline and said why"
other=$(q "SELECT min(name) FROM mesh.backends WHERE enabled AND name > '$be'")
echo "$rows" | grep -q "^reconciled $other: "
ok $? "the backend after it in the sweep still got its share and was reconciled ($other)"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE backend_kind = '$be'")" 0 "nothing was recorded on the silent backend"
done_testing
