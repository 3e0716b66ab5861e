#!/bin/bash
# The embedded case made whole: `--setup-host` (root, install time) delegates a cgroup subtree
# and gives workspaces a filesystem of their own; the daemon then runs as postgres and the
# tiers' limits hold: memory (incl. /tmp, whose size comes from the tier), pids, CPU metering,
# disk. OOM kills are attributed to the exec that suffered them, file reads are bounded, a
# restart re-uses the delegation, and without a bound the daemon refuses to share the disk it
# was told to protect.
. "$(dirname "$0")/lib.sh"
id postgres >/dev/null 2>&1 || skip_all "no postgres user"
[ -d /sys/fs/cgroup/memory ] || skip_all "no cgroup v1 memory hierarchy on this host"
plan 32
sd_prepare_as postgres --max-file-bytes 1048576
CG="mesh-test-$$-$RANDOM"
SD_CGROUPS+=("$CG")
"$SANDBOXD" --setup-host postgres --state-dir "$SD_STATE" --cgroup-name "$CG" \
    --disk-bytes $((256 << 20)) > "$SD_DIR/setup.out" 2>&1
ok $? "--setup-host prepares the host"
# a cgroup join after an idle moment waits out an RCU grace period unless they are expedited
if [ -w /sys/kernel/rcu_expedited ]; then
  is "$(cat /sys/kernel/rcu_expedited) $(jq -r .rcu_expedited "$SD_STATE/host.json")" "1 true" \
     "--setup-host expedites RCU grace periods, and host.json records it"
  like "$(cat "$SD_DIR/setup.out")" "expedited RCU grace periods on" "and says so"
else
  skip "no writable /sys/kernel/rcu_expedited here" 2
fi
is "$(stat -c %U "/sys/fs/cgroup/memory/$CG" "/sys/fs/cgroup/pids/$CG/cgroup.procs" | sort -u)" postgres \
   "the cgroup subtree and its cgroup.procs belong to postgres"
is "$(jq -r .cgroup_name "$SD_STATE/host.json")" "$CG" "host.json records the subtree for later starts"
sd_launch_as postgres
caps=$(api GET /v1/capabilities)
is "$(field "$caps" '[.capabilities.resource_limits,.capabilities.compute_metering,.capabilities.disk_limits]|map(tostring)|join(",")')" \
   "true,true,true" "as postgres: resource_limits, compute_metering and disk_limits are true"

new_ws d1 '{"size":"small"}'
is "$(cat "/sys/fs/cgroup/memory/$CG/d1/memory.limit_in_bytes") $(cat "/sys/fs/cgroup/pids/$CG/d1/pids.max")" \
   "536870912 128" "the small tier's memory and pids limits are written"
r=$(run_sh d1 'df -k /tmp /dev/shm | awk "NR>1{print \$2}" | tr "\n" " "')
is "$(stdout_of "$r")" "524288 524288 " "/tmp and /dev/shm are sized to the tier's memory"
is "$(field "$r" '(.cpu_ms|type) + "," + (.memory_peak_bytes|type)')" "number,number" \
   "an exec reports cpu_ms and memory_peak_bytes"

# a workspace cannot leave its groups: no cgroup filesystem inside, none it may mount (not even
# from a user namespace of its own), and the host sees its processes where they were put
r=$(run_sh d1 'ls /sys/fs/cgroup 2>&1 | head -1; unshare -Urm sh -c "mkdir -p /tmp/cg && mount -t cgroup -o memory none /tmp/cg && echo MOUNTED" 2>&1 | tail -1')
like "$(stdout_of "$r")" "No such file|cannot access" "no cgroup filesystem is visible in the workspace"
exec_json d1 '{"argv":["sleep","3"]}' > /dev/null & sp=$!
for _ in $(seq 1 50); do grep -qs . /sys/fs/cgroup/memory/"$CG"/d1/exec-*/cgroup.procs && break; sleep 0.1; done
members=$(cat /sys/fs/cgroup/memory/"$CG"/d1/exec-*/cgroup.procs 2>/dev/null | wc -l)
wait $sp
echo "$(stdout_of "$r")" | grep -q MOUNTED
ok $(( $? == 0 || members < 1 )) "mounting a cgroup hierarchy fails, and a running exec is in its own memory group ($members process)"

# CPU: a background job's CPU counts even though it is killed, never reaped, when the exec
# ends (a fixed amount of work, ~0.5 s of CPU here; the command's own share is a few ms)
r=$(run_sh d1 '(python3 -c "sum(range(40000000))"; touch /tmp/worked; sleep 60) & while [ ! -e /tmp/worked ]; do sleep 0.05; done')
cpu=$(field "$r" '.cpu_ms|floor')
ok $(( ! (cpu > 150) )) "the CPU of a background job killed with its exec is metered (cpu_ms $cpu)"

# memory: a hog in one exec, a sleeper in another; only the hog is oom
exec_json d1 '{"argv":["sleep","3"]}' > "$SD_DIR/sleeper" & sp=$!
r=$(exec_json d1 '{"argv":["python3","-c","b=[]\nwhile True: b.append(bytearray(32<<20))"],"timeout_ms":30000}')
wait $sp
is "$(field "$r" .oom_killed)" true "a memory hog comes back oom_killed"
peak=$(field "$r" .memory_peak_bytes)
ok $(( ! (peak > 400 * 1048576 && peak <= 536870912) )) "its memory_peak_bytes is near the limit ($peak)"
is "$(field "$(cat "$SD_DIR/sleeper")" '[.exit_code,.oom_killed]|map(tostring)|join(",")')" "0,false" \
   "a concurrent exec of the same workspace is not reported oom"
kill -0 "$SD_PID"; ok $? "the daemon survives the OOM kill"

# /tmp is memory: filling it ends as an OOM kill inside the workspace
new_ws d2 '{"size":"small"}'
r=$(run_sh d2 'head -c 700M /dev/zero > /tmp/fill')
is "$(field "$r" .oom_killed)" true "filling /tmp is an OOM kill inside the workspace"
kill -0 "$SD_PID"; ok $? "the daemon survives it"
is "$(cat "/sys/fs/cgroup/memory/$CG/d2/memory.max_usage_in_bytes")" 536870912 "the tmpfs pages were charged to the workspace"
api DELETE /v1/workspaces/d2 >/dev/null

# pids (the bomb has 3 s to reach pids.max: 1 s was not always enough on a loaded 2-core machine)
r=$(exec_json d1 '{"argv":["bash","-c","b(){ b|b& }; b; sleep 3"],"timeout_ms":15000}')
like "$(stderr_of "$r")" "Resource temporarily unavailable" "a fork bomb stops at pids.max as postgres"

# disk: the workspace filesystem fills, the host's does not
before=$(stat -c %b "$SD_STATE/workspaces.img")
r=$(run_sh d1 'head -c 400M /dev/zero > big; echo rc=$?')
like "$(stderr_of "$r")" "Disk quota exceeded" "filling /workspace stops at its quota, inside a filesystem of its own"
after=$(stat -c %b "$SD_STATE/workspaces.img")
is "$after" "$before" "the host filesystem gave it nothing more: the image was allocated at set-up"
run_sh d1 'rm -f big' >/dev/null

# bounded reads: a file that grows while read is refused or read whole, never more
exec_json d1 '{"argv":["sh","-c","head -c 4096 /dev/zero > grow; while :; do head -c 4096 /dev/zero >> grow; done"],"timeout_ms":4000}' >/dev/null & gp=$!
sleep 0.3
bad=0; seen=""
for _ in $(seq 1 30); do
    curl -s -m 10 --unix-socket "$SD_SOCKET" -o "$SD_DIR/got" -w '%{http_code}' \
        "http://sd/v1/workspaces/d1/files?path=grow" > "$SD_DIR/code"
    code=$(cat "$SD_DIR/code"); size=$(stat -c %s "$SD_DIR/got")
    seen="$seen $code"
    case $code in
        200) [ "$size" -le 1048576 ] || bad=1 ;;
        409) grep -q file_changed "$SD_DIR/got" || bad=1 ;;
        413) grep -q file_too_large "$SD_DIR/got" || bad=1 ;;
        *) bad=1 ;;
    esac
done
wait $gp
is "$bad" 0 "a growing file is read whole, refused file_changed or file_too_large, never more"
like "$seen" "409|413" "(it was caught growing or over the limit:$(echo "$seen" | tr ' ' '\n' | sort | uniq -c | tr '\n' ' '))"
hwm=$(awk '/VmHWM/{print $2}' "/proc/$SD_PID/status")
ok $(( hwm > 65536 )) "the daemon's peak memory stays small (${hwm} kB)"

# a restart re-uses the delegation
sd_stop TERM
sd_launch_as postgres
is "$(field "$(api GET /v1/capabilities)" .capabilities.resource_limits)" true "a restarted daemon re-uses the subtree"
is "$(stdout_of "$(run_sh d1 'echo back')")" back "and its workspace still runs"

# no bound: the daemon refuses to put workspaces on the filesystem it must protect
sd_start_as postgres --protect-path "$SD_DIR"
is "$(field "$(api GET /v1/capabilities)" .capabilities.disk_limits)" false "without a filesystem of their own disk_limits is false"
r=$(api PUT /v1/workspaces/w1)
is "$(status) $(err_code "$r")" "507 disk_unbounded" "and a new workspace on the protected filesystem is refused"
like "$(field "$r" .error.message)" "setup-host" "the message says how to set one up"

# --no-expedited-rcu leaves the kernel as it is (a state dir and subtree of its own)
if [ -w /sys/kernel/rcu_expedited ]; then
  was=$(cat /sys/kernel/rcu_expedited)
  echo 0 > /sys/kernel/rcu_expedited
  other=$(mktemp -d "$SD_DIR/other.XXXXXX"); CG2="$CG-keep"; SD_CGROUPS+=("$CG2")
  "$SANDBOXD" --setup-host postgres --state-dir "$other" --cgroup-name "$CG2" --no-expedited-rcu \
      > "$SD_DIR/setup2.out" 2>&1
  is "$? $(cat /sys/kernel/rcu_expedited) $(jq -r .rcu_expedited "$other/host.json")" "0 0 false" \
     "--no-expedited-rcu prepares the host and leaves RCU grace periods as they were"
  sd_stop TERM
  sd_start_as postgres --state-dir "$other"
  like "$(cat "$SD_DIR/log")" "RCU grace periods are not expedited" "a daemon started so says what it costs"
  echo "$was" > /sys/kernel/rcu_expedited
else
  skip "no writable /sys/kernel/rcu_expedited here" 2
fi
finish
