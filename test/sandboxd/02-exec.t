#!/bin/bash
# Exec semantics: exit codes, signals, stdin, env, dir, 127, output clamping, concurrency,
# exec keys, metering fields, output "tail" (the last bytes as they came).
. "$(dirname "$0")/lib.sh"
plan 31
sd_start --max-output-bytes 1000
new_ws e1

r=$(exec_json e1 '{"argv":["true"]}')
is "$(field "$r" '[.exit_code,.signal,.timed_out,.killed,.oom_killed,.truncated]|map(tostring)|join(",")')" \
   "0,null,false,false,false,false" "true exits 0 with all flags false"
like "$(field "$r" .wall_ms)" '^[0-9.]+$' "wall_ms is a number"
like "$(field "$r" .cpu_ms)" '^[0-9.]+$' "cpu_ms is a number with compute_metering"
r=$(run_sh e1 'exit 7'); is "$(field "$r" .exit_code)" 7 "exit code 7 is reported"
r=$(run_sh e1 'kill -TERM $$'); is "$(field "$r" '[.exit_code,.signal]|map(tostring)|join(",")')" "143,15" "killed by its own SIGTERM: 128+15, signal 15"
r=$(exec_json e1 '{"argv":["no-such-command-xyz"]}')
is "$(field "$r" .exit_code)" 127 "command not found exits 127"
like "$(stderr_of "$r")" "command not found" "reason on stderr"
r=$(exec_json e1 '{"argv":["/workspace"]}'); is "$(field "$r" .exit_code)" 127 "not executable exits 127"
r=$(exec_json e1 '{"argv":["cat"],"stdin_b64":"'"$(printf 'line1\nline2' | base64 -w0)"'"}')
is "$(stdout_of "$r")" "$(printf 'line1\nline2')" "stdin is fed and closed"
r=$(exec_json e1 '{"argv":["cat"]}'); is "$(field "$r" .exit_code)" 0 "without stdin_b64 stdin is /dev/null"
r=$(exec_json e1 '{"argv":["sh","-c","echo $FOO-$HOME-$LANG-$TMPDIR-$PATH"],"env":{"FOO":"bar"}}')
is "$(stdout_of "$r")" "bar-/workspace-C.UTF-8-/tmp-/usr/local/bin:/usr/bin:/bin" "env over the base environment"
run_sh e1 'mkdir -p sub/dir' >/dev/null
r=$(exec_json e1 '{"argv":["pwd"],"dir":"sub/dir"}'); is "$(stdout_of "$r")" /workspace/sub/dir "relative dir"
r=$(exec_json e1 '{"argv":["pwd"],"dir":"/tmp"}'); is "$(stdout_of "$r")" /tmp "absolute dir"
r=$(exec_json e1 '{"argv":["pwd"]}'); is "$(stdout_of "$r")" /workspace "default dir /workspace"
r=$(exec_json e1 '{"argv":["pwd"],"dir":"missing"}'); is "$(field "$r" .exit_code)" 127 "missing dir exits 127"
r=$(exec_json e1 '{"argv":["sh","-c","echo out; echo err >&2"]}')
is "$(stdout_of "$r")|$(stderr_of "$r")" "out|err" "stdout and stderr are separate"

r=$(exec_json e1 '{"argv":["sh","-c","seq 1 10000"]}')
is "$(field "$r" '[.truncated,.stdout_bytes]|map(tostring)|join(",")')" "true,48894" "output beyond the clamp is truncated, bytes counted"
out=$(stdout_of "$r")
like "$out" "…\[mesh: 47894 bytes omitted\]…" "marker with the omitted count"
is "$(echo "$out" | head -1)|$(echo "$out" | tail -1)" "1|10000" "head and tail are kept"
r=$(exec_json e1 '{"argv":["sh","-c","seq 1 10000"],"max_output_bytes":10}')
like "$(stdout_of "$r")" '^1
2
…\[mesh: 48884 bytes omitted\]…
9999
10000$' "per-request max_output_bytes"

# output "tail": the last max_output_bytes as they came, no marker, capped by
# --max-kept-output-bytes rather than --max-output-bytes (1000 here)
r=$(exec_tail e1 '{"argv":["sh","-c","seq 1 10000"],"max_output_bytes":30001,"output":"tail"}')
is "$(field "$r" '[.truncated,.stdout_bytes,.stdout_kept,.rest]|map(tostring)|join(",")')|$(md5sum < "$SD_DIR/tail.out")" \
   "true,48894,30001,0|$(seq 1 10000 | tail -c 30001 | md5sum)" "output tail keeps exactly the last bytes, counts all"
is "$(field "$r" '[has("stdout_b64"),has("stderr_b64")]|map(tostring)|join(",")')" "false,false" \
   "output tail answers raw bytes after the JSON line, no base64"
r=$(exec_tail e1 '{"argv":["sh","-c","printf '"'"'a\\000b\\377c\\n'"'"'; printf '"'"'\\376'"'"' >&2"],"output":"tail"}')
is "$(od -An -c "$SD_DIR/tail.out" | tr -s ' ')|$(od -An -c "$SD_DIR/tail.err" | tr -s ' ')|$(field "$r" .rest)" \
   "$(printf 'a\000b\377c\n' | od -An -c | tr -s ' ')|$(printf '\376' | od -An -c | tr -s ' ')|0" \
   "output tail keeps NUL, newlines and invalid UTF-8 bytes as they came, stdout then stderr"
r=$(exec_tail e1 '{"argv":["seq","1","100000"],"max_output_bytes":100000000,"output":"tail"}')
is "$(field "$r" .truncated)|$(md5sum < "$SD_DIR/tail.out")" "false|$(seq 1 100000 | md5sum)" \
   "output tail grows its buffer for output larger than 64 KiB, all of it kept"
r=$(exec_json e1 '{"argv":["true"],"output":"middle"}'); is "$(err_code "$r")" bad_request "an unknown output mode is bad_request"
r=$(exec_json e1 '{"argv":[]}'); is "$(err_code "$r")" bad_request "empty argv is bad_request"
r=$(exec_json e1 '{"argv":["a\u0000b"]}'); is "$(err_code "$r")" bad_request "NUL in argv is refused"
r=$(exec_json e1 '{"argv":["true"],"timeout_ms":"x"}'); is "$(err_code "$r")" bad_request "wrong type timeout_ms"

# concurrency: four 1-second sleeps finish together, and a long exec does not block others
start=$(date +%s%N)
pids=()
for i in 1 2 3 4; do
    exec_json e1 '{"argv":["sh","-c","sleep 1; echo '$i'"],"exec_key":"c'$i'"}' > "$SD_DIR/conc.$i" &
    pids+=($!)
done
LONG="4.$RANDOM"   # a unique duration to find this exec's process from the host
exec_json e1 '{"argv":["sleep","'"$LONG"'"],"exec_key":"long"}' > /dev/null & pids+=($!)
for _ in $(seq 1 200); do pgrep -u nobody -f "^sleep $LONG\$" >/dev/null && break; sleep 0.05; done
r=$(exec_json e1 '{"argv":["true"],"exec_key":"long"}')
is "$(err_code "$r")" "exec_key_in_use" "a running exec's key cannot be reused (409)"
api POST /v1/workspaces/e1/execs/long/kill >/dev/null
wait "${pids[@]}"
outs=$(for i in 1 2 3 4; do stdout_of "$(cat "$SD_DIR/conc.$i")"; done | sort | tr '\n' ' ')
is "$outs" "1 2 3 4 " "concurrent execs in one workspace all complete"
new_ws e2
r1=$(exec_json e1 '{"argv":["sh","-c","echo one"]}') & p1=$!
r2=$(exec_json e2 '{"argv":["sh","-c","echo two"]}')
wait $p1
is "$(stdout_of "$r2")" two "concurrent execs across workspaces"
finish
