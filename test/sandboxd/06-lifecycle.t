#!/bin/bash
# Lifecycle: idempotent acquire, hibernate and wake, destroy, --release default, restart after
# SIGTERM and SIGKILL (re-adoption), lost holders, drain, single-instance lock.
. "$(dirname "$0")/lib.sh"
plan 27
sd_start
holder_of() { jq -r .holder_pid "$SD_STATE/workspaces/$1/meta.json"; }

r=$(api PUT /v1/workspaces/l1 '{"size":"large","labels":{"owner":"t"}}')
is "$(field "$r" '[.state,.created,.woke,.size]|map(tostring)|join(",")')" "running,true,false,large" "first acquire creates"
r=$(api PUT /v1/workspaces/l1 '{"size":"small"}')
is "$(field "$r" '[.state,.created,.woke,.size]|map(tostring)|join(",")')" "running,false,false,large" "second acquire returns it unchanged"
api PUT "/v1/workspaces/l1/files?path=data.txt" "persisted" >/dev/null

r=$(api DELETE /v1/workspaces/l1 '{"prefer":"hibernate"}')
is "$(field "$r" .outcome)" hibernated "release with prefer hibernate"
holder=$(holder_of l1)
is "$(field "$(api GET /v1/workspaces/l1)" .state)" hibernated "state is hibernated"
r=$(exec_json l1 '{"argv":["true"]}'); is "$(status) $(err_code "$r")" "409 workspace_not_running" "exec on a hibernated workspace: 409"
r=$(api PUT /v1/workspaces/l1)
is "$(field "$r" '[.state,.created,.woke]|map(tostring)|join(",")')" "running,false,true" "acquire wakes it"
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","data.txt"]}')")" persisted "files survive hibernation"

run_sh l1 'echo after-restart > r.txt' >/dev/null
holder=$(holder_of l1)
sd_stop TERM
kill -0 "$holder" 2>/dev/null; ok $? "SIGTERM leaves the workspace's holder alive"
sd_launch
is "$(holder_of l1)" "$holder" "a restarted daemon re-adopts the live holder"
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","r.txt"]}')")" after-restart "workspace usable after SIGTERM restart"
sd_stop KILL
sd_launch
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","r.txt"]}')")" after-restart "workspace usable after SIGKILL restart"
sd_stop KILL
kill -KILL "$(holder_of l1)"
mkdir -p "$SD_STATE/workspaces/half-made/files"
sd_launch
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","r.txt"]}')")" after-restart "a lost holder is restarted over the same files"
test ! -e "$SD_STATE/workspaces/half-made"; ok $? "a directory without state is cleaned up at start"

kill -KILL "$(holder_of l1)"
for _ in $(seq 1 50); do kill -0 "$(holder_of l1)" 2>/dev/null || break; sleep 0.1; done
r=$(exec_json l1 '{"argv":["true"]}')
is "$(status) $(err_code "$r")" "409 workspace_not_running" "a workspace whose holder died answers workspace_not_running"
r=$(api PUT /v1/workspaces/l1)
is "$(field "$r" '[.state,.woke]|map(tostring)|join(",")')" "running,true" "acquire restarts it"
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","r.txt"]}')")" after-restart "with its files"

"$SANDBOXD" "${SD_ARGS[@]}" 2>"$SD_DIR/second.log"
rc=$?
ok $((rc == 0)) "a second daemon on the same state dir refuses to start"
like "$(cat "$SD_DIR/second.log")" "lock" "and says why"

DRAIN="1.$RANDOM"   # a unique duration to find this exec's process from the host
exec_json l1 '{"argv":["sh","-c","sleep '"$DRAIN"'; echo drained"]}' > "$SD_DIR/drain" & ep=$!
for _ in $(seq 1 100); do pgrep -u nobody -f "^sleep $DRAIN\$" >/dev/null 2>&1 && break; sleep 0.05; done
kill -TERM "$SD_PID"
wait $ep
is "$(stdout_of "$(cat "$SD_DIR/drain")")" drained "SIGTERM drains an exec in flight"
wait "$SD_PID"; rc=$?
is "$rc" 0 "then the daemon exits 0"

SD_ARGS+=(--release hibernate)
sd_launch
r=$(api DELETE /v1/workspaces/l1)
is "$(field "$r" .outcome)" hibernated "--release hibernate is the default outcome"
api PUT /v1/workspaces/l1 >/dev/null
holder=$(holder_of l1)
r=$(api DELETE /v1/workspaces/l1 '{"prefer":"destroy"}')
is "$(field "$r" .outcome)" destroyed "prefer destroy overrides it"
kill -0 "$holder" 2>/dev/null; ok $((! $?)) "the holder is gone"
test ! -e "$SD_STATE/workspaces/l1"; ok $? "the workspace directory is removed"
test ! -e "/sys/fs/cgroup/pids/$SD_CGROUP/l1"; ok $? "its cgroups are removed"
mkdir -m 700 "$SD_DIR/closed"
"$SANDBOXD" --state-dir "$SD_DIR/closed/state" --socket "$SD_DIR/closed/s" 2>"$SD_DIR/closed.log"
ok $(( $? == 0 )) "a state dir the sandbox user cannot reach is refused at start"
like "$(cat "$SD_DIR/closed.log")" "cannot traverse" "with a clear reason"
finish
