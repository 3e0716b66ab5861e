#!/bin/bash
# Resource limits and process-tree control: pids limit vs fork bomb, memory limit vs hog
# (oom_killed), timeout and kill call end the whole tree, leftovers die with the exec,
# release kills running execs.
. "$(dirname "$0")/lib.sh"
plan 14
sd_start
new_ws lim '{"size":"small"}'

# no process of a tree may survive: look on the host for sleeps with this run's unique
# durations among the sandbox user's processes (the test's own curl runs as root)
M=$((RANDOM % 9000 + 1000))
survivors() { pgrep -u nobody -f "$1" | wc -l; }

r=$(exec_json lim '{"argv":["sh","-c","(sleep '"$M"'01 &); setsid sh -c \"sleep '"$M"'02 &\"; sleep '"$M"'03 & sleep '"$M"'04"],"timeout_ms":1000}')
is "$(field "$r" '[.timed_out,.exit_code,.killed]|map(tostring)|join(",")')" "true,137,false" "timeout reports timed_out and 137"
is "$(survivors "sleep ${M}0[1-4]")" 0 "no process of the timed-out tree survives (double-forked and setsid included)"

r=$(run_sh lim 'sleep '"$M"'11 & (sleep '"$M"'12 &); echo started')
is "$(stdout_of "$r")" started "exec returns when its first process exits"
is "$(survivors "sleep ${M}1[12]")" 0 "background leftovers are killed with the exec"

exec_json lim '{"argv":["sh","-c","sleep '"$M"'21 & sleep '"$M"'22"],"exec_key":"k-1"}' > "$SD_DIR/killed" & ep=$!
for _ in $(seq 1 100); do [ "$(survivors "^sleep ${M}2[12]")" -ge 2 ] && break; sleep 0.05; done
r=$(api POST /v1/workspaces/lim/execs/k-1/kill)
is "$(status) $(field "$r" .killed)" "200 true" "kill by exec_key answers killed"
wait $ep
is "$(field "$(cat "$SD_DIR/killed")" '[.killed,.timed_out]|map(tostring)|join(",")')" "true,false" "the exec returns killed:true"
is "$(survivors "sleep ${M}2[12]")" 0 "the killed tree is gone"
r=$(api POST /v1/workspaces/lim/execs/k-1/kill)
is "$(status) $(err_code "$r")" "404 exec_not_found" "killing a finished exec: exec_not_found"

r=$(exec_json lim '{"argv":["bash","-c","b(){ b|b& }; b; sleep 2; echo survived"],"timeout_ms":20000}')
like "$(stderr_of "$r")" "Resource temporarily unavailable" "a fork bomb hits the pids limit"
r=$(run_sh lim 'echo alive')
is "$(stdout_of "$r")" alive "the workspace still works after the fork bomb"

r=$(exec_json lim '{"argv":["python3","-c","b=[]\nwhile True: b.append(bytearray(64<<20))"],"timeout_ms":30000}')
is "$(field "$r" '[.oom_killed,.timed_out]|map(tostring)|join(",")')" "true,false" "a memory hog comes back oom_killed"
like "$(field "$r" .exit_code)" '^(137|1)$' "and is killed"
r=$(run_sh lim 'echo alive')
is "$(stdout_of "$r")" alive "the workspace still works after the OOM kill"

exec_json lim '{"argv":["sleep","'"$M"'31"]}' > "$SD_DIR/released" & ep=$!
for _ in $(seq 1 100); do [ "$(survivors "^sleep ${M}31")" -ge 1 ] && break; sleep 0.05; done
api DELETE /v1/workspaces/lim >/dev/null
wait $ep
is "$(survivors "sleep ${M}31") $(field "$(cat "$SD_DIR/released")" .killed)" "0 true" "release kills running execs before answering"
finish
