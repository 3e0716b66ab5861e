#!/bin/bash
# HTTP layer: capabilities, bearer auth, error bodies and codes, body limit, routing.
. "$(dirname "$0")/lib.sh"
plan 28
sd_start --max-body-bytes 4096

caps=$(api GET /v1/capabilities)
is "$(status)" 200 "capabilities answers 200"
is "$(field "$caps" .protocol)" 1 "protocol version 1"
is "$(field "$caps" .capabilities.resource_limits)" true "root: resource_limits detected"
is "$(field "$caps" .capabilities.compute_metering)" true "root: compute_metering detected"
is "$(field "$caps" '[.capabilities.egress_control,.capabilities.snapshot,.capabilities.hibernate,.capabilities.caller_chosen_id,.capabilities.shell]|map(tostring)|join(",")')" \
   "true,true,true,true,true" "egress, snapshot (overlay in a user namespace), hibernate, caller id, shell true"
is "$(field "$caps" .tiers.small.memory_mb)" 512 "tier table is served"

resp=$(curl -s -m 10 -w '\n%{http_code}' -H "Authorization: Bearer wrong-$SD_TOKEN" "$SD_URL/v1/capabilities")
is "$(echo "$resp" | tail -1)" 401 "wrong token gets 401"
is "$(err_code "$(echo "$resp" | head -1)")" unauthorized "code unauthorized"
echo "$resp" | grep -q -- "$SD_TOKEN"; ok $((! $?)) "the token never appears in the response"
resp=$(curl -s -m 10 -w '\n%{http_code}' "$SD_URL/v1/workspaces")
is "$(echo "$resp" | tail -1)" 401 "missing token gets 401"
grep -q -- "$SD_TOKEN" "$SD_DIR/log"; ok $((! $?)) "the token never appears in the log"

r=$(api GET /v1/nothing); is "$(status) $(err_code "$r")" "404 not_found" "unknown route: 404 not_found"
r=$(api POST /v1/capabilities); is "$(status) $(err_code "$r")" "405 method_not_allowed" "wrong method: 405"
r=$(api PUT /v1/workspaces/a '{"size":'); is "$(status) $(err_code "$r")" "400 bad_json" "malformed JSON: bad_json"
r=$(api PUT /v1/workspaces/a '[1,2]'); is "$(status) $(err_code "$r")" "400 bad_request" "non-object body: bad_request"
r=$(api PUT /v1/workspaces/a '{"size":7}'); is "$(status) $(err_code "$r")" "400 bad_request" "wrong type: bad_request"
like "$(field "$r" .error.message)" size "the message names the field"
r=$(api PUT /v1/workspaces/a '{"size":"huge"}'); is "$(status) $(err_code "$r")" "400 unknown_tier" "unknown tier"
r=$(api PUT /v1/workspaces/-bad '{}'); is "$(status) $(err_code "$r")" "400 bad_workspace_id" "bad workspace id"
r=$(api GET /v1/workspaces/nope); is "$(status) $(err_code "$r")" "404 workspace_not_found" "unknown id: 404"
r=$(api DELETE /v1/workspaces/nope); is "$(status) $(err_code "$r")" "404 workspace_not_found" "release unknown id: 404"
r=$(exec_json nope '{"argv":["true"]}'); is "$(status) $(err_code "$r")" "404 workspace_not_found" "exec in unknown id: 404"
big=$(head -c 10000 /dev/zero | tr '\0' a)
r=$(api PUT /v1/workspaces/a "{\"labels\":{\"x\":\"$big\"}}"); is "$(status) $(err_code "$r")" "413 body_too_large" "oversized body: 413"
r=$(printf '{"labels":{"x":"%s"}}' "$big" | curl -s -m 10 -H "Authorization: Bearer $SD_TOKEN" -H 'Transfer-Encoding: chunked' -X PUT --data-binary @- "$SD_URL/v1/workspaces/a")
is "$(err_code "$r")" body_too_large "oversized chunked body: 413 too"

new_ws lab1 '{"labels":{"team":"red"}}'
new_ws lab2 '{"labels":{"team":"blue"}}'
r=$(api GET '/v1/workspaces?label=team=blue')
is "$(field "$r" '[.workspaces[].id]|join(",")')" lab2 "list filters by label"
r=$(api GET /v1/workspaces)
is "$(field "$r" '[.workspaces[].id]|sort|join(",")')" "lab1,lab2" "list shows all workspaces"
conns=$(curl -s -m 10 -o /dev/null -o /dev/null -w '%{num_connects} ' -H "Authorization: Bearer $SD_TOKEN" \
    "$SD_URL/v1/capabilities" "$SD_URL/v1/workspaces")
is "$conns" "1 0 " "HTTP keep-alive: the second request reuses the connection"
kill -0 "$SD_PID"; ok $? "daemon still alive after bad input"
finish
