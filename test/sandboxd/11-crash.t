#!/bin/bash
# Crash consistency of the holder bookkeeping, as the embedded daemon runs (non-root, unix
# socket): a daemon SIGKILLed while it creates workspaces, at delays of 10-70 ms, leaves
# nothing running that the restarted daemon does not list -- every holder it or a predecessor
# started is adopted or killed, and its log says which. A SIGTERM with --hibernate-on-exit
# ends commands in flight at once and leaves no sandbox process. The host is prepared as
# the embedded daemon's is (--setup-host: a delegated cgroup subtree, a filesystem of its own),
# so what a kill leaves includes cgroups.
. "$(dirname "$0")/lib.sh"
plan 16
USER_=postgres
sd_prepare_as "$USER_" --hibernate-on-exit
SD_CGROUP="mesh-test-$$-$RANDOM"
SD_CGROUPS+=("$SD_CGROUP")
"$SANDBOXD" --setup-host "$USER_" --state-dir "$SD_STATE" --cgroup-name "$SD_CGROUP" \
    --disk-bytes $((256 << 20)) > "$SD_DIR/setup.out" 2>&1 ||
    { echo "Bail out! --setup-host failed: $(cat "$SD_DIR/setup.out")"; exit 1; }
sd_launch_as "$USER_"

relaunch() { sd_launch_as "$USER_"; }   # the same non-root daemon again
# ids of the workspaces whose sandboxes run on the host for this state dir (from the sandboxes'
# own mounts, test/lib/holders.sh: an adopted standby shows its workspace), one line each,
# sorted; a workspace with two holders shows twice
running_ids() { workspace_holder_names "$SD_STATE" "$USER_"; }
# standbys running beside them: never more than the pool keeps (--standby, 1 by default)
standbys() { standby_holder_count "$SD_STATE" "$USER_"; }
listed_ids() { api GET /v1/workspaces | jq -r '.workspaces[] | select(.state == "running") | .id' | sort; }
settle() {
    for _ in $(seq 1 50); do
        [ "$(running_ids)" = "$(listed_ids)" ] && [ "$(standbys)" -le 1 ] && return 0
        sleep 0.1
    done
    return 1
}

wait_standby_ready
new_ws base
like "$(grep 'workspace base:' "$SD_DIR/log")" "adopted standby holder" "the first workspace is made from a standby"
n=0
mismatch=0
for delay in 10 20 30 40 50 60 70; do
    for k in 1 2 3; do
        n=$((n + 1))
        api PUT "/v1/workspaces/c$n" >/dev/null &
    done
    sleep "0.0$((delay / 10))"
    kill -KILL "$SD_PID"; wait "$SD_PID" 2>/dev/null
    wait   # the interrupted acquires
    relaunch
    if ! settle; then
        mismatch=$((mismatch + 1))
        diag "after a kill at ${delay} ms: running [$(running_ids | tr '\n' ' ')] listed [$(listed_ids | tr '\n' ' ')] standbys $(standbys)"
    fi
done
is "$mismatch" 0 "after each of 7 kills during creation, what runs is exactly what is listed (and at most one standby)"
is "$(running_ids | uniq -d)" "" "no workspace has two holders"
groups=$(find "/sys/fs/cgroup/memory/$SD_CGROUP" -mindepth 1 -maxdepth 1 -type d ! -name '_standby-*' -printf '%f\n' | sort)
is "$groups" "$(listed_ids)" "and the cgroups of the subtree are exactly the running workspaces' (and the standby's)"
like "$(cat "$SD_DIR/log")" "re-adopted holder" "the log says which holders were adopted"
like "$(grep 'workspace base:' "$SD_DIR/log")" "re-adopted holder" "a restarted daemon re-adopts the holder a workspace took from the pool, not killing it as a stray"
is "$(field "$(run_sh base 'echo alive')" .stdout_b64 | base64 -d)" alive "a workspace created before the kills still works"

# a holder started but never recorded (the daemon died between the two): killed at start
kill -KILL "$SD_PID"; wait "$SD_PID" 2>/dev/null
mkdir -p "$SD_STATE/workspaces/stray/files"
chown -R "$USER_" "$SD_STATE/workspaces/stray"
setpriv --reuid="$USER_" --regid="$(id -g "$USER_")" --init-groups -- \
    env -i "MESH_SANDBOXD_HOLDER=$SD_STATE/workspaces/stray" /usr/bin/bwrap --unshare-user --unshare-pid \
    --unshare-net --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib \
    --symlink usr/lib64 /lib64 --proc /proc --dev /dev --bind "$SD_STATE/workspaces/stray/files" \
    /workspace --new-session --as-pid-1 -- sleep infinity >/dev/null 2>&1 &
stray=$!
for _ in $(seq 1 50); do [ -n "$(running_ids | grep -x stray)" ] && break; sleep 0.1; done
is "$(running_ids | grep -x stray)" stray "a holder nobody recorded runs while the daemon is down"
relaunch
for _ in $(seq 1 50); do kill -0 "$stray" 2>/dev/null || break; sleep 0.1; done
kill -0 "$stray" 2>/dev/null; ok $((! $?)) "the restarted daemon killed it"
like "$(grep stray "$SD_DIR/log")" "killed stray holder" "and logged that it did"
test ! -e "$SD_STATE/workspaces/stray"; ok $? "its directory (no state) is removed"
wait "$stray" 2>/dev/null

# a holder of another state dir is none of our business
other=$(mktemp -d /tmp/mesh-sd-other.XXXXXX); SD_DIRS+=("$other"); chmod 755 "$other"
setpriv --reuid="$USER_" --regid="$(id -g "$USER_")" --init-groups -- \
    env -i "MESH_SANDBOXD_HOLDER=$other/workspaces/x" /usr/bin/bwrap --unshare-user --unshare-pid \
    --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --new-session --as-pid-1 -- sleep infinity >/dev/null 2>&1 &
foreign=$!
sleep 0.3
kill -KILL "$SD_PID"; wait "$SD_PID" 2>/dev/null
relaunch
kill -0 "$foreign"; ok $? "a holder marked for another state dir is left alone"
pkill -KILL -P "$foreign"; kill -KILL "$foreign"; wait "$foreign" 2>/dev/null

# SIGTERM with --hibernate-on-exit: a command in flight is killed, not waited for
SLEEP="37.$RANDOM"
run_sh base "sleep $SLEEP" > "$SD_DIR/inflight" & ep=$!
for _ in $(seq 1 100); do pgrep -u "$USER_" -f "^sleep $SLEEP\$" >/dev/null && break; sleep 0.05; done
kill -TERM "$SD_PID"
for _ in $(seq 1 50); do kill -0 "$SD_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$SD_PID" 2>/dev/null; ok $((! $?)) "SIGTERM with a command in flight exits within 5 s"
wait $ep
is "$(field "$(cat "$SD_DIR/inflight")" .killed)" true "the command in flight was killed (and answered so)"
is "$(settled_holder_names "$SD_STATE" "$USER_")" "" "no sandbox process (workspace's or standby) is left after the hibernating exit"
is "$(ls -A "$SD_STATE/workspaces" | grep -c '^_standby-') $(ls -d /sys/fs/cgroup/*/"$SD_CGROUP"/_standby-* 2>/dev/null | wc -l)" "0 0" \
   "and no standby directory or cgroup"
finish
