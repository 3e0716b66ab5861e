#!/bin/bash
# Background execs: answered 202 while the command keeps running, supervised by the daemon
# without any connection; their output fetched from byte offsets (long poll, acknowledgement,
# byte-identical reassembly, backpressure instead of loss), killed with a signal that reaches
# the whole tree, forgotten by DELETE or with their workspace; a restarted daemon knows none.
. "$(dirname "$0")/lib.sh"
plan 73

# bg_start WS KEY SCRIPT [EXTRA_JSON] -> the 202 document of sh -c SCRIPT in the background
bg_start() {
    exec_json "$1" "$(jq -nc --arg k "$2" --arg s "$3" --argjson x "${4:-{\}}" \
        '{argv:["sh","-c",$s], background:true, exec_key:$k} + $x')"
}
# bg_get WS KEY STDOUT_FROM STDERR_FROM [WAIT_MS] [MAX_BYTES] -> the JSON line (with "rest");
# the bytes land in $SD_DIR/bg$BG_TAG.out and .err (BG_TAG: one per concurrent client)
bg_get() {
    local f="$SD_DIR/bg${BG_TAG:-}"
    api GET "/v1/workspaces/$1/execs/$2/output?stdout_from=$3&stderr_from=$4&wait_ms=${5:-0}&max_bytes=${6:-1048576}" \
        > "$f.body"
    head -n 1 "$f.body" | jq -e 'has("running")' >/dev/null 2>&1 || { cat "$f.body"; return 1; }
    frame_split "$f.body" "$f.out" "$f.err"
}
# bg_fetch_all WS KEY OUT ERR [MAX_BYTES]: fetches from the first bytes still held until the
# end, appending the bytes to OUT and ERR (each fetch acknowledges the last); prints the last
# JSON line; touches $SD_DIR/misframed when a chunk did not start where the previous one ended
bg_fetch_all() {
    local so=0 se=0 line i
    : > "$3"; : > "$4"
    for i in $(seq 1 3000); do
        line=$(bg_get "$1" "$2" $so $se 5000 "${5:-1048576}") || { echo "$line"; return 1; }
        [ $i = 1 ] && { so=$(field "$line" .stdout_from); se=$(field "$line" .stderr_from); }
        [ "$(field "$line" '.stdout_from == '$so' and .stderr_from == '$se' and .rest == 0')" = true ] ||
            touch "$SD_DIR/misframed"
        cat "$SD_DIR/bg${BG_TAG:-}.out" >> "$3"; cat "$SD_DIR/bg${BG_TAG:-}.err" >> "$4"
        so=$((so + $(field "$line" .stdout_kept))); se=$((se + $(field "$line" .stderr_kept)))
        if [ "$(field "$line" .running)" = false ] && [ $so = "$(field "$line" .stdout_bytes)" ] &&
           [ $se = "$(field "$line" .stderr_bytes)" ]; then
            echo "$line"; return 0
        fi
    done
    echo "never ended"; return 1
}
# bg_end WS KEY -> the last JSON line once the command ended (its output acknowledged)
bg_end() { bg_fetch_all "$1" "$2" "$SD_DIR/end.out" "$SD_DIR/end.err"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$SD_PID/status"; }
# running_anywhere PATTERN: a process on the host whose command line matches PATTERN
running_anywhere() { pgrep -f "$1" >/dev/null; }

pids=()
sd_start
acq=$(api PUT /v1/workspaces/bg)
is "$(field "$acq" .capabilities.background)" true "acquire reports the background capability"

# --- 202 at once; the command keeps running; long poll; offsets ---
wait_go='while [ ! -e /workspace/go ]; do sleep 0.05; done'
resp=$(bg_start bg a "echo first; $wait_go; printf second; echo oops >&2")
is "$(status)" 202 "a background exec answers 202"
is "$(field "$resp" '[.exec_key, .background] | join(" ")')" "a true" "with its key and background true"
line=$(bg_get bg a 0 0 30000)
is "$(field "$line" '[.running, .stdout_from, .stdout_kept, .stdout_bytes, .stderr_kept] | join(" ")')" \
   "true 0 6 6 0" "its output so far comes while it runs"
is "$(cat "$SD_DIR/bg.out")" first "the bytes are the command's"
api GET "/v1/workspaces/bg/execs/a/output?stdout_from=6&stderr_from=0&wait_ms=60000" > "$SD_DIR/poll.body" &
poller=$!
sleep 1
kill -0 $poller 2>/dev/null
ok $? "a GET at the end of what was written waits (long poll)"
api PUT "/v1/workspaces/bg/files?path=go" "" >/dev/null
for _ in $(seq 1 300); do kill -0 $poller 2>/dev/null || break; sleep 0.1; done
kill -0 $poller 2>/dev/null && { kill $poller; ok 1 "the long poll answers when new bytes come"; } ||
    ok 0 "the long poll answers when new bytes come, long before its wait_ms"
wait $poller
line=$(frame_split "$SD_DIR/poll.body" "$SD_DIR/p.out" "$SD_DIR/p.err")
like "$(cat "$SD_DIR/p.out"; cat "$SD_DIR/p.err")" "^second(oops)?$" "with the new bytes, from the offset asked for"
line=$(bg_end bg a)
is "$(field "$line" '[.running, .exit_code, .killed, .timed_out, .stdout_bytes, .stderr_bytes] | join(" ")')" \
   "false 0 false false 12 5" "the end comes with the exec's end fields"
like "$(field "$line" '[.wall_ms, .memory_peak_bytes, (.egress_denials|length)] | join(" ")')" \
   "^[0-9.]+ ([0-9]+)? 0$" "wall time, peak memory and egress denials as a foreground exec's"
bg_get bg a 12 5 >/dev/null
line=$(bg_get bg a 3 0)
is "$(field "$line" '[.stdout_from, .stdout_kept] | join(" ")')" "12 0" \
   "bytes already acknowledged are dropped: from is the first byte still held"
bg_get bg a 13 0 >/dev/null
is "$(status)" 400 "an offset past the stream's total is refused"
is "$(err_code "$(cat "$SD_DIR/bg.body")")" bad_offset "... as bad_offset"

# --- the sandboxd driver's reader (src/backends/sandboxd_parse.c) on the daemon's answers ---
reader="$SD_DIR/frame_read"
cc -Wall -Wextra -Werror -std=gnu11 -I "$REPO/src" -o "$reader" "$REPO/test/sandboxd/frame_read.c" \
   "$REPO/src/backends/sandboxd_parse.c" $(pkg-config --cflags --libs jansson)
ok $? "the driver's reader of framed answers builds on its own"
bg_start bg rd 'printf "\000\377out"; printf err >&2' >/dev/null
bg_end bg rd >/dev/null
api GET "/v1/workspaces/bg/execs/rd/output?stdout_from=1&stderr_from=0" > "$SD_DIR/rd.body"
is "$("$reader" "$SD_DIR/rd.body" | tr '\n' ' ')" "frame 1 4 3 progress 0 1 0 5 3 - " \
   "it reads an ended background answer as the daemon framed it (offsets, totals, raw bytes)"
head -c -1 "$SD_DIR/rd.body" > "$SD_DIR/rd.short"
is "$("$reader" "$SD_DIR/rd.short")" refused "and refuses one a byte short of what it announced"
exec_json bg '{"argv":["printf","x"],"output":"tail"}' > "$SD_DIR/fg.tail"
is "$("$reader" "$SD_DIR/fg.tail" | tr '\n' ' ')" "frame 1 1 0 progress refused " \
   "a foreground exec's tail answer has the same frame (and is no background progress)"

# --- acknowledgement apart from the offsets read from ---
bg_start bg ack 'printf abcdef' >/dev/null
bg_end bg ack >/dev/null   # its last fetch acknowledged nothing
ackget() { api GET "/v1/workspaces/bg/execs/ack/output?$1" > "$SD_DIR/ack.body"
           line=$(frame_split "$SD_DIR/ack.body" "$SD_DIR/ack.out" "$SD_DIR/ack.err")
           echo "$(field "$line" .stdout_from) $(cat "$SD_DIR/ack.out")"; }
is "$(ackget 'stdout_from=3&stdout_ack=1')" "3 def" "bytes come from stdout_from while only those before stdout_ack are dropped"
is "$(ackget 'stdout_from=0&stdout_ack=0')" "1 bcdef" "so bytes held back can be asked for again"
api GET "/v1/workspaces/bg/execs/ack/output?stdout_from=2&stdout_ack=3" >/dev/null
is "$(status)" 400 "an acknowledgement past the offset read from is bad_request"

# --- reassembly: NUL, non-UTF-8, both streams, small chunks ---
gen='head -c 3000000 /dev/urandom > /workspace/r.bin; printf "\000\377\376x" >> /workspace/r.bin; cat /workspace/r.bin; head -c 70000 /workspace/r.bin >&2'
bg_start bg r "$gen" >/dev/null
line=$(bg_fetch_all bg r "$SD_DIR/r.out" "$SD_DIR/r.err" 262144)
api GET "/v1/workspaces/bg/files?path=r.bin" > "$SD_DIR/r.bin"
ok $(cmp -s "$SD_DIR/r.out" "$SD_DIR/r.bin"; echo $?) "fetched in chunks, stdout is byte-identical (NUL and non-UTF-8 bytes included)"
ok $(cmp -s "$SD_DIR/r.err" <(head -c 70000 "$SD_DIR/r.bin"); echo $?) "and so is stderr"
[ ! -e "$SD_DIR/misframed" ]
ok $? "every chunk starts where the previous one ended"

# --- backpressure: 20 MB nobody fetches is held at the cap, then fetched whole ---
rss_before=$(rss_kb)
bg_start bg big 'head -c 20000000 /dev/urandom | tee /workspace/big.bin' >/dev/null
for _ in $(seq 1 600); do
    line=$(bg_get bg big 0 0 1000 1)
    [ "$(field "$line" .stdout_bytes)" -ge 4194304 ] && break
done
sleep 1
line=$(bg_get bg big 0 0 0 1)
is "$(field "$line" '[.running, .stdout_bytes] | join(" ")')" "true 4194304" \
   "a stream nobody fetches is held at the cap (4 MiB) and the command waits, still running"
growth=$(( $(rss_kb) - rss_before ))
diag "daemon RSS grew by $growth kB while 4 MiB were held"
ok $(( growth > 16384 )) "the daemon's memory stays bounded (grew ${growth} kB, under 16 MiB, for 20 MB written)"
line=$(bg_fetch_all bg big "$SD_DIR/big.out" "$SD_DIR/big.err")
api GET "/v1/workspaces/bg/files?path=big.bin" > "$SD_DIR/big.bin"
is "$(field "$line" '[.exit_code, .stdout_bytes] | join(" ")')" "0 20000000" "then it runs to its end"
ok $(cmp -s "$SD_DIR/big.out" "$SD_DIR/big.bin"; echo $?) "and all 20 MB come byte-identical: nothing was lost"

# --- many floods at once: all records' buffers together stay within --background-buffer-total
#     (64 MiB), and each flood still holds a pipe's capacity (64 KiB) ---
floods=24   # 4 MiB each would be 96 MiB
held_all() { local i sum=0 min=-1 b
             for i in $(seq 1 $floods); do
                 b=$(field "$(bg_get bg "flood$i" 0 0 0 1)" .stdout_bytes); sum=$((sum + b))
                 { [ $min -lt 0 ] || [ "$b" -lt $min ]; } && min=$b
             done; echo "$sum $min"; }
rss_before=$(rss_kb)
for i in $(seq 1 $floods); do bg_start bg "flood$i" 'yes flood' >/dev/null; done
for _ in $(seq 1 100); do   # most of the total held, every flood at its pipe's capacity
    read -r sum min < <(held_all)
    [ "$sum" -ge $((48 << 20)) ] && [ "$min" -ge 65536 ] && break
    sleep 0.1
done
sleep 1
read -r sum min < <(held_all)
diag "$floods floods nobody fetches hold $sum bytes, the least $min"
ok $(( sum > (64 << 20) + floods * 65536 )) \
   "$floods floods nobody fetches hold $sum bytes together: within the total (64 MiB) and a pipe's capacity each"
ok $(( min < 65536 )) "and each holds a pipe's capacity at least (the least: $min bytes)"
growth=$(( $(rss_kb) - rss_before ))
diag "daemon RSS grew by $growth kB while $floods floods were held"
if [ -n "${MESH_SANDBOXD:-}" ]; then   # a sanitizer's allocator keeps freed memory on purpose
    skip "memory growth is LeakSanitizer's to judge with $MESH_SANDBOXD (the total held is checked above)"
else
    ok $(( growth > 65536 + floods * 64 + 16384 )) \
       "the daemon grew by ${growth} kB: the total's 64 MiB and little more (yes would have written GBs)"
fi
for i in $(seq 1 $floods); do
    api POST "/v1/workspaces/bg/execs/flood$i/kill" '{"signal":"KILL"}' >/dev/null
    bg_end bg "flood$i" >/dev/null
    api DELETE "/v1/workspaces/bg/execs/flood$i" >/dev/null
done

# --- kill: TERM reaches the tree; KILL ends it; timeout ---
tree='trap "echo parent >> /workspace/marks" TERM
( trap "echo child >> /workspace/marks; exit 0" TERM; while :; do sleep 0.05; done ) &
( setsid sh -c "trap \"echo grandchild >> /workspace/marks; exit 0\" TERM; while :; do sleep 0.05; done" & ) &
echo started; while :; do sleep 0.05; done'
bg_start bg t "$tree" >/dev/null
bg_get bg t 0 0 30000 >/dev/null
sleep 0.5
resp=$(api POST /v1/workspaces/bg/execs/t/kill '{"signal":"TERM"}')
is "$(status) $(field "$resp" .killed)" "200 true" "kill with TERM answers killed"
for _ in $(seq 1 100); do [ "$(api GET '/v1/workspaces/bg/files?path=marks' | wc -l)" -ge 3 ] && break; sleep 0.1; done
is "$(api GET '/v1/workspaces/bg/files?path=marks' | sort | tr '\n' ' ')" "child grandchild parent " \
   "TERM reaches the command, a child that traps it and a double-forked grandchild"
is "$(field "$(bg_get bg t 8 0)" .running)" true "a command that traps TERM and goes on keeps running"
api POST /v1/workspaces/bg/execs/t/kill >/dev/null
line=$(bg_end bg t)
is "$(field "$line" '[.running, .signal, .exit_code, .killed] | join(" ")')" "false 9 137 true" \
   "KILL (the default) ends the tree; killed is true"
api POST /v1/workspaces/bg/execs/t/kill '{"signal":"TERM"}' >/dev/null
is "$(status)" 404 "a kill of an ended exec is exec_not_found"
bg_start bg term 'sleep 1000; echo never' >/dev/null
bg_get bg term 0 0 >/dev/null
api POST /v1/workspaces/bg/execs/term/kill '{"signal":"TERM"}' >/dev/null
line=$(bg_end bg term)
is "$(field "$line" '[.signal, .exit_code, .killed] | join(" ")')" "15 143 true" \
   "a command ended by a kill call's TERM reads killed, with signal 15"
resp=$(api POST /v1/workspaces/bg/execs/term/kill '{"signal":"STOP"}')
is "$(status) $(err_code "$resp")" "400 bad_signal" "a signal outside the list is bad_signal"
bg_start bg slow 'sleep 1917' '{"timeout_ms":300}' >/dev/null
line=$(bg_end bg slow)
is "$(field "$line" '[.timed_out, .killed, .signal] | join(" ")')" "true false 9" "timeout_ms ends a background exec"
running_anywhere "sleep 1917"
ok $(( ! $? )) "and its processes are gone"

# --- foreground execs take the signal too ---
(exec_json bg '{"argv":["sh","-c","trap \"echo bye; exit 7\" TERM; touch fgready; sleep 1000 & wait"],"exec_key":"fg","output":"tail"}' \
    > "$SD_DIR/fg.body") &
fg=$!
for _ in $(seq 1 300); do api GET '/v1/workspaces/bg/files?path=fgready' >/dev/null; [ "$(status)" = 200 ] && break; sleep 0.1; done
api POST /v1/workspaces/bg/execs/fg/kill '{"signal":"TERM"}' >/dev/null
wait $fg
line=$(frame_split "$SD_DIR/fg.body" "$SD_DIR/fg.out" "$SD_DIR/fg.err")
is "$(field "$line" '[.exit_code, .killed] | join(" ")') $(cat "$SD_DIR/fg.out")" "7 false bye" \
   "a foreground exec's kill with TERM reaches its trap; it exits by itself, so killed is false"

# --- records: DELETE, keys, unknown ---
bg_start bg d 'sleep 1000' >/dev/null
resp=$(api DELETE /v1/workspaces/bg/execs/d)
is "$(status) $(err_code "$resp")" "409 exec_running" "DELETE of a running background exec is exec_running"
resp=$(bg_start bg d true)
is "$(status) $(err_code "$resp")" "409 exec_key_in_use" "a key in use by a running exec is exec_key_in_use"
api POST /v1/workspaces/bg/execs/d/kill >/dev/null
bg_end bg d >/dev/null
resp=$(bg_start bg d true)
is "$(status) $(err_code "$resp")" "409 exec_key_in_use" "... and by an ended exec not yet forgotten"
api DELETE /v1/workspaces/bg/execs/d >/dev/null
is "$(status)" 204 "DELETE forgets an ended exec: 204"
api GET "/v1/workspaces/bg/execs/d/output" >/dev/null
is "$(status)" 404 "its output is gone then"
api DELETE /v1/workspaces/bg/execs/d >/dev/null
is "$(status)" 404 "a second DELETE is 404"
bg_start bg d 'echo again' >/dev/null
is "$(status)" 202 "the key is free again"
is "$(field "$(bg_end bg d)" .exit_code) $(cat "$SD_DIR/end.out")" "0 again" "and names the new exec"
resp=$(api GET "/v1/workspaces/bg/execs/nope/output")
is "$(status) $(err_code "$resp")" "404 exec_not_found" "an unknown key is exec_not_found"
exec_json bg '{"argv":["true"],"exec_key":"fgkey"}' >/dev/null
api GET "/v1/workspaces/bg/execs/fgkey/output" >/dev/null
is "$(status)" 404 "a foreground exec's key has no record"
resp=$(exec_json bg '{"argv":["true"],"background":true}')
is "$(status) $(err_code "$resp")" "400 bad_request" "a background exec without exec_key is bad_request"
api GET "/v1/workspaces/bg/execs/d/output?wait_ms=60001" >/dev/null
is "$(status)" 400 "wait_ms over 60000 is bad_request"
api GET "/v1/workspaces/bg/execs/d/output?stdout_from=-1" >/dev/null
is "$(status)" 400 "a negative offset is bad_request"

# --- 20 at once, each with its own output ---
for i in $(seq 1 20); do
    bg_start bg "c$i" "i=0; while [ \$i -lt 2000 ]; do echo c$i-\$i; i=\$((i+1)); done; echo c$i-err >&2" \
        > "$SD_DIR/start.$i" &
    pids+=($!)
done
wait "${pids[@]}"; pids=()
starts=0
for i in $(seq 1 20); do [ "$(field "$(cat "$SD_DIR/start.$i")" .background)" = true ] && starts=$((starts + 1)); done
is $starts 20 "20 background execs start at once in one workspace"
good=0
for i in $(seq 1 20); do
    (BG_TAG=$i
     line=$(bg_fetch_all bg "c$i" "$SD_DIR/c$i.out" "$SD_DIR/c$i.err" 4096)
     [ "$(field "$line" .exit_code)" = 0 ] &&
     cmp -s "$SD_DIR/c$i.out" <(for n in $(seq 0 1999); do echo "c$i-$n"; done) &&
     [ "$(cat "$SD_DIR/c$i.err")" = "c$i-err" ] && touch "$SD_DIR/c$i.good") &
    pids+=($!)
done
wait "${pids[@]}"; pids=()
for i in $(seq 1 20); do [ -e "$SD_DIR/c$i.good" ] && good=$((good + 1)); done
is $good 20 "each one's output, fetched concurrently in small chunks, is its own and whole"

# --- several GETs on one exec at once ---
bg_start bg many 'head -c 1000000 /dev/zero | tr "\0" x; echo' >/dev/null
for i in $(seq 1 8); do
    (api GET "/v1/workspaces/bg/execs/many/output?wait_ms=10000&max_bytes=65536" > "$SD_DIR/m$i.body";
     frame_split "$SD_DIR/m$i.body" "$SD_DIR/m$i.out" "$SD_DIR/m$i.err" > "$SD_DIR/m$i.line") &
    pids+=($!)
done
wait "${pids[@]}"; pids=()
good=0
for i in $(seq 1 8); do
    [ "$(field "$(cat "$SD_DIR/m$i.line")" '.stdout_from == 0 and .rest == 0')" = true ] &&
    [ "$(tr -d x < "$SD_DIR/m$i.out" | wc -c)" = 0 ] && good=$((good + 1))
done
is $good 8 "eight concurrent GETs on one exec each get well-framed bytes"
bg_end bg many >/dev/null

# --- release: running background execs end, records go ---
bg_start bg rel 'sleep 1918' >/dev/null
bg_start bg rel2 'echo kept' >/dev/null
bg_end bg rel2 >/dev/null
resp=$(api DELETE /v1/workspaces/bg)
is "$(status) $(field "$resp" .outcome)" "200 destroyed" "release answers while a background exec runs"
running_anywhere "sleep 1918"
ok $(( ! $? )) "release killed the background command"
new_ws bg
api GET "/v1/workspaces/bg/execs/rel/output" >/dev/null
is "$(status)" 404 "the killed exec's record went with the release"
api GET "/v1/workspaces/bg/execs/rel2/output" >/dev/null
is "$(status)" 404 "and so did the ended one's"

# --- hibernation ends them too ---
bg_start bg hib 'sleep 1919' >/dev/null
api DELETE /v1/workspaces/bg '{"prefer":"hibernate"}' >/dev/null
running_anywhere "sleep 1919"
ok $(( ! $? )) "hibernation kills running background commands"
new_ws bg
api GET "/v1/workspaces/bg/execs/hib/output" >/dev/null
is "$(status)" 404 "and forgets their records"

# --- their number per workspace is bounded ---
sd_stop TERM
SD_ARGS+=(--max-background-execs 2)
sd_launch
new_ws cap
bg_start cap c1 'sleep 1921' >/dev/null
bg_start cap c2 'echo ended' >/dev/null
bg_end cap c2 >/dev/null
r=$(bg_start cap c3 'sleep 1921')
is "$(status) $(err_code "$r")" "429 too_many_background_execs" \
   "past --max-background-execs a start is refused, ended records not forgotten counted"
api DELETE /v1/workspaces/cap/execs/c2 >/dev/null
bg_start cap c3 'echo room' >/dev/null
is "$(status)" 202 "a forgotten record makes room"
api DELETE /v1/workspaces/cap >/dev/null
new_ws bg   # woken after the restart, for what follows

# --- a daemon restart leaves no record ---
bg_start bg rs 'sleep 1920' >/dev/null
bg_start bg rs2 'echo done' >/dev/null
bg_end bg rs2 >/dev/null
sd_stop TERM
running_anywhere "sleep 1920"
ok $(( ! $? )) "the drain at SIGTERM ends background commands"
sd_launch
api GET "/v1/workspaces/bg/execs/rs/output" >/dev/null
is "$(status)" 404 "a restarted daemon has no record of the running one"
api GET "/v1/workspaces/bg/execs/rs2/output" >/dev/null
is "$(status)" 404 "nor of the ended one"
is "$(stdout_of "$(run_sh bg 'echo alive')")" alive "the workspace itself survived the restart"
bg_start bg after 'echo fine' >/dev/null
is "$(status) $(field "$(bg_end bg after)" .exit_code)" "202 0" "and runs background execs again"
# --- ended records go --background-ttl after their end, fetched or not: swept on time while
#     the daemon's children end all the time (a workspace made and released over and over),
#     the records' own workspace untouched meanwhile; a running one stays ---
sd_stop TERM
# the last two arguments were --max-background-execs 2: three records are wanted here
SD_ARGS=("${SD_ARGS[@]:0:${#SD_ARGS[@]}-2}" --background-ttl 2)
sd_launch
new_ws ttl
bg_start ttl long 'sleep 1922' >/dev/null
bg_start ttl fetched 'echo f' >/dev/null
bg_end ttl fetched >/dev/null   # its end fetched, the record never DELETEd
bg_start ttl unfetched 'echo u' >/dev/null
swept=""
for _ in $(seq 1 150); do
    api PUT /v1/workspaces/churn >/dev/null; api DELETE /v1/workspaces/churn >/dev/null
    [ "$(grep -cE "workspace ttl: background exec (fetched|unfetched) forgotten" "$SD_DIR/log")" = 2 ] &&
        { swept=yes; break; }
done
ok $([ -n "$swept" ]; echo $?) "ended records are swept after --background-ttl on a busy daemon, the end fetched or not"
api GET /v1/workspaces/ttl/execs/fetched/output >/dev/null; s1=$(status)
api GET /v1/workspaces/ttl/execs/unfetched/output >/dev/null; s2=$(status)
is "$s1 $s2" "404 404" "and are gone"
line=$(bg_get ttl long 0 0)
is "$(status) $(field "$line" .running)" "200 true" "a running one is kept"
api DELETE /v1/workspaces/ttl >/dev/null
running_anywhere "sleep 1922"
ok $(( ! $? )) "and ends with its workspace"
finish
