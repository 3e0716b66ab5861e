#!/bin/bash
# Single-workspace mode (--single-workspace ID, the daemon inside a Kubernetes pod): only that
# workspace can be created, used or listed; every route naming another id is refused before a
# handler runs, whatever the method; and the token is accepted in X-Mesh-Sandboxd-Token (a
# Kubernetes API server's pods/proxy consumes Authorization), a wrong one in that header too
# is refused, and it never appears in an answer or the log.
. "$(dirname "$0")/lib.sh"
plan 20
sd_start --single-workspace mesh-1-7

r=$(api PUT /v1/workspaces/mesh-1-8 '{"size":"small"}')
is "$(status) $(err_code "$r")" "403 workspace_refused" "another workspace cannot be created"
r=$(api PUT /v1/workspaces/mesh-1-7 '{"size":"small"}')
is "$(status)" 200 "the one workspace can"
for route in "POST /v1/workspaces/mesh-1-8/exec" "GET /v1/workspaces/mesh-1-8/files?path=a" \
             "POST /v1/workspaces/mesh-1-8/execs/k/kill" "DELETE /v1/workspaces/mesh-1-8" \
             "GET /v1/workspaces/mesh-1-8/execs/k/output" "DELETE /v1/workspaces/mesh-1-8/execs/k"; do
  r=$(api ${route% *} "${route#* }" '{"argv":["true"]}')
  is "$(status) $(err_code "$r")" "403 workspace_refused" "refused: $route"
done
for route in "GET /v1/snapshots" "PUT /v1/snapshots/s1" "GET /v1/snapshots/s1"; do
  r=$(api ${route% *} "${route#* }" '{"workspace":"mesh-1-7"}')
  is "$(status) $(err_code "$r")" "403 workspace_refused" "no snapshots in a pod's daemon: $route"
done
r=$(api GET "/v1/workspaces/..%2Fmesh-1-7")
is "$(status) $(err_code "$r")" "404 not_found" "an id shaped to climb out reaches no workspace"
is "$(stdout_of "$(run_sh mesh-1-7 'echo served')")" served "its own workspace serves execs"
is "$(api GET /v1/capabilities | jq -r .capabilities.snapshot)" false "and declares no snapshot capability"
is "$(api GET /v1/workspaces | jq -r '[.workspaces[].id]|join(",")')" mesh-1-7 "the list holds only it"
r=$(api POST /v1/workspaces/mesh-1-7/exec '{"argv":["echo","bg"],"background":true,"exec_key":"b"}')
api GET "/v1/workspaces/mesh-1-7/execs/b/output?wait_ms=20000" > "$SD_DIR/single.body"
for _ in $(seq 1 30); do
  [ "$(head -n 1 "$SD_DIR/single.body" | jq -r .running)" = true ] || break
  api GET "/v1/workspaces/mesh-1-7/execs/b/output?wait_ms=20000" > "$SD_DIR/single.body"
done
line=$(frame_split "$SD_DIR/single.body" "$SD_DIR/single.out" "$SD_DIR/single.err")
is "$(field "$line" .exit_code) $(cat "$SD_DIR/single.out")" "0 bg" "its own workspace serves background execs and their output"
api DELETE /v1/workspaces/mesh-1-7/execs/b >/dev/null
is "$(status)" 204 "and forgets them"

code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H "X-Mesh-Sandboxd-Token: $SD_TOKEN" "$SD_URL/v1/workspaces/mesh-1-7")
is "$code" 200 "the token is accepted in X-Mesh-Sandboxd-Token"
resp=$(curl -s -m 10 -w '\n%{http_code}' -H "X-Mesh-Sandboxd-Token: wrong-$SD_TOKEN" "$SD_URL/v1/workspaces/mesh-1-7")
is "$(echo "$resp" | tail -1) $(err_code "$(echo "$resp" | head -1)")" "401 unauthorized" "a wrong one there is refused"
grep -q -- "$SD_TOKEN" "$SD_DIR/log"; ok $((! $?)) "the token never appears in the log"
api DELETE /v1/workspaces/mesh-1-7 >/dev/null
