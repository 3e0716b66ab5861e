#!/bin/bash
# Extend calls: a running exec's deadline moves later while it runs (foreground and background),
# the daemon's timeout honours the new deadline and still kills at it; concurrent extends all
# count; an exec that ended, an unknown key and a bad body are refused with stable codes.
. "$(dirname "$0")/lib.sh"
plan 28

# extend WS KEY BODY -> the answer's body
extend() { api POST "/v1/workspaces/$1/execs/$2/extend" "$3"; }
# extend_when_running WS KEY BY_MS -> the first answer that is not exec_not_found (the exec
# is registered a moment after its request was sent), at most 30 s of tries
extend_when_running() {
    local out
    for _ in $(seq 1 300); do
        out=$(extend "$1" "$2" "{\"by_ms\": $3}")
        [ "$(err_code "$out")" = exec_not_found ] || break
        sleep 0.1
    done
    echo "$out"
}
# fg_exec WS KEY SCRIPT TIMEOUT_MS OUTFILE: a foreground exec of sh -c SCRIPT with KEY, its
# answer into OUTFILE, in the background of this shell (its pid in $!)
fg_exec() {
    exec_json "$1" "$(jq -nc --arg k "$2" --arg s "$3" --argjson t "$4" \
        '{argv:["sh","-c",$s], exec_key:$k, timeout_ms:$t}')" > "$5" &
}

sd_start
caps=$(api GET /v1/capabilities)
is "$(field "$caps" .capabilities.extend_timeout)" true "the daemon declares extend_timeout"
acq=$(api PUT /v1/workspaces/ext)
is "$(field "$acq" .capabilities.extend_timeout)" true "and acquire reports it"

# --- a foreground command outlives its first deadline once extended ---
fg_exec ext fg1 'sleep 6; echo survived' 3000 "$SD_DIR/fg1.json"
fg1=$!
resp=$(extend_when_running ext fg1 15000)
is "$(field "$resp" '[.extended, .timeout_ms] | join(" ")')" "true 18000" \
   "an extend answers with the timeout it now has in all"
wait $fg1
out=$(cat "$SD_DIR/fg1.json")
is "$(field "$out" '[.exit_code, .timed_out, .killed] | join(" ")')" "0 false false" \
   "the command ran past its first deadline to its own end"
is "$(stdout_of "$out")" survived "with all its output"
is "$(field "$out" '.wall_ms >= 5500')" true "it ran its 6 s (past the 3 s it was given)"

# --- and is still killed at the new deadline ---
fg_exec ext fg2 'sleep 60' 1000 "$SD_DIR/fg2.json"
fg2=$!
resp=$(extend_when_running ext fg2 3000)
is "$(field "$resp" .timeout_ms)" 4000 "extended from 1 s to 4 s"
wait $fg2
out=$(cat "$SD_DIR/fg2.json")
is "$(field "$out" '[.timed_out, .killed] | join(" ")')" "true false" "it timed out at its new deadline"
is "$(field "$out" '.wall_ms >= 3500 and .wall_ms < 50000')" true \
   "after the extended 4 s, not the first 1 s, and long before its 60 s"

# --- a background command ---
resp=$(exec_json ext "$(jq -nc '{argv:["sh","-c","sleep 5; echo bg"], background:true, exec_key:"bg1", timeout_ms:2000}')")
is "$(status)" 202 "a background exec starts"
resp=$(extend ext bg1 '{"by_ms": 20000}')
is "$(field "$resp" '[.extended, .timeout_ms] | join(" ")')" "true 22000" "a background exec is extended too"
for _ in $(seq 1 600); do
    line=$(api GET "/v1/workspaces/ext/execs/bg1/output?stdout_from=0&stderr_from=0&wait_ms=5000" | head -n 1)
    [ "$(field "$line" .running)" = false ] && break
done
is "$(field "$line" '[.running, .exit_code, .timed_out] | join(" ")')" "false 0 false" \
   "it ran past its first deadline to its own end"

# --- refusals ---
resp=$(extend ext bg1 '{"by_ms": 1000}')
is "$(status) $(err_code "$resp")" "409 exec_ended" "an exec that ended (its record kept): 409 exec_ended"
resp=$(extend ext nosuch '{"by_ms": 1000}')
is "$(status) $(err_code "$resp")" "404 exec_not_found" "an unknown key: 404 exec_not_found"
resp=$(exec_json ext "$(jq -nc '{argv:["sleep","60"], background:true, exec_key:"k1"}')")
api POST /v1/workspaces/ext/execs/k1/kill '{"signal": "KILL"}' >/dev/null
resp=$(extend ext k1 '{"by_ms": 1000}')
like "$(status) $(err_code "$resp")" "^(409 exec_ended)$" "a killed exec: 409 exec_ended, its deadline stays"
api DELETE /v1/workspaces/ext/execs/bg1 >/dev/null
resp=$(extend ext bg1 '{"by_ms": 1000}')
is "$(status) $(err_code "$resp")" "404 exec_not_found" "a forgotten one: 404 exec_not_found"
for body in '{}' '{"by_ms": 0}' '{"by_ms": -5}' '{"by_ms": "10"}' '{"by_ms": 604800001}'; do
    resp=$(extend ext nosuch "$body")
    is "$(status) $(err_code "$resp")" "400 bad_request" "a bad body ($body): 400 bad_request"
done
resp=$(extend ext nosuch 'not json')
is "$(status) $(err_code "$resp")" "400 bad_json" "a body that is not JSON: 400 bad_json"
resp=$(api GET /v1/workspaces/ext/execs/nosuch/extend)
is "$(status)" 405 "GET: 405"
resp=$(extend nosuchws fg1 '{"by_ms": 1000}')
is "$(status)" 404 "an unknown workspace: 404"

# --- concurrent extends: every one counts, each answered with a distinct total ---
fg_exec ext c1 'sleep 60' 2000 "$SD_DIR/c1.json"
c1=$!
resp=$(extend_when_running ext c1 1000)
is "$(field "$resp" .timeout_ms)" 3000 "the first extend"
pids=()
for i in $(seq 1 8); do
    ( extend ext c1 '{"by_ms": 500}' > "$SD_DIR/c1.ext.$i" ) &
    pids+=($!)
done
wait "${pids[@]}"
totals=$(cat "$SD_DIR"/c1.ext.* | jq -r .timeout_ms | sort -n | tr '\n' ' ')
is "$totals" "3500 4000 4500 5000 5500 6000 6500 7000 " "8 concurrent extends each added its 500 ms"
wait $c1
out=$(cat "$SD_DIR/c1.json")
is "$(field "$out" .timed_out)" true "the command timed out at the sum"
is "$(field "$out" '.wall_ms >= 6500 and .wall_ms < 50000')" true "after 7 s, not 2 s"
finish
