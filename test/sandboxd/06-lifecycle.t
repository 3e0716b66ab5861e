#!/bin/bash
# Lifecycle: idempotent acquire, hibernate and wake, destroy, --release default, restart after
# SIGTERM and SIGKILL (re-adoption), lost holders, drain, single-instance lock; an idle daemon's
# main thread sleeps, and still reaps a sandbox that ends while its creator's connection stays.
. "$(dirname "$0")/lib.sh"
plan 35
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
# groups of no workspace, as a daemon killed between giving a standby's groups their workspace's
# name and writing its state leaves them: removed at start, but only where nothing runs
groups_of() { for c in memory pids cpu cpuacct; do ls -d "/sys/fs/cgroup/$c/$SD_CGROUP/$1" 2>/dev/null; done; }
for c in memory pids cpu cpuacct; do mkdir -p "/sys/fs/cgroup/$c/$SD_CGROUP/leftover/exec-1" "/sys/fs/cgroup/$c/$SD_CGROUP/busy"; done
sleep 300 & busy=$!
echo "$busy" > "/sys/fs/cgroup/memory/$SD_CGROUP/busy/cgroup.procs"
sd_launch
is "$(stdout_of "$(exec_json l1 '{"argv":["cat","r.txt"]}')")" after-restart "a lost holder is restarted over the same files"
test ! -e "$SD_STATE/workspaces/half-made"; ok $? "a directory without state is cleaned up at start"
is "$(groups_of leftover)" "" "so are the cgroups of a workspace it does not know"
kill -0 "$busy"; ok $? "a process in such a group is not killed"
is "$(groups_of busy | grep -c memory)" 1 "and its group is kept (and logged)"
kill "$busy"; wait "$busy" 2>/dev/null

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
# An idle daemon's main thread sleeps until something happens: over 3 s idle it is woken at
# most once (a 1 s tick would wake it 3 times).
wakeups() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$SD_PID/task/$SD_PID/status"; }
before=$(wakeups); sleep 3; after=$(wakeups)
ok $(( after - before > 1 )) "an idle daemon's main thread is not woken on a timer ($((after - before)) wakeups in 3 s)"

# A sandbox whose holder dies while the connection that created it stays open: its bwrap is a
# child of that connection's thread, and the main thread reaps it anyway.
mkfifo "$SD_DIR/keep.in"
cat >"$SD_DIR/keep.py" <<'PY'
import http.client, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
auth = {"Authorization": "Bearer " + sys.argv[2]}
conn.request("PUT", "/v1/workspaces/k1", headers=auth)
r = conn.getresponse(); r.read()
print(r.status, "kept" if conn.sock else "closed", flush=True)
sys.stdin.read()          # hold the connection until the test closes the fifo
conn.request("GET", "/v1/workspaces/k1", headers=auth)
r = conn.getresponse(); r.read()
print(r.status, flush=True)
PY
python3 "$SD_DIR/keep.py" "$SD_PORT" "$SD_TOKEN" <"$SD_DIR/keep.in" >"$SD_DIR/keep.out" 2>&1 &
keeper=$!
exec 3>"$SD_DIR/keep.in"
for _ in $(seq 1 300); do [ -s "$SD_DIR/keep.out" ] && break; sleep 0.1; done
is "$(head -1 "$SD_DIR/keep.out")" "200 kept" "a workspace acquired on a keep-alive connection"
holder=$(holder_of k1)
bwrap=$(awk '{print $4}' "/proc/$holder/stat")
is "$(awk '{print $4}' "/proc/$bwrap/stat")" "$SD_PID" "its bwrap is the daemon's child"
kill -KILL "$holder"
for _ in $(seq 1 200); do [ -e "/proc/$bwrap" ] || break; sleep 0.1; done
ok $([ ! -e "/proc/$bwrap" ]; echo $?) "the holder killed, its bwrap is reaped while that connection stays open"
exec 3>&-
wait "$keeper"
is "$(sed -n 2p "$SD_DIR/keep.out")" 200 "the connection still answers"

mkdir -m 700 "$SD_DIR/closed"
# a cgroup name of its own, removed on exit (the default, mesh-sandboxd, would stay behind)
SD_CGROUPS+=("mesh-test-$$-closed")
"$SANDBOXD" --state-dir "$SD_DIR/closed/state" --socket "$SD_DIR/closed/s" --cgroup-name "mesh-test-$$-closed" 2>"$SD_DIR/closed.log"
ok $(( $? == 0 )) "a state dir the sandbox user cannot reach is refused at start"
like "$(cat "$SD_DIR/closed.log")" "cannot traverse" "with a clear reason"
finish
