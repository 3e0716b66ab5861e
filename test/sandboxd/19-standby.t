#!/bin/bash
# Standby holders (docs/sandboxd.md): a new workspace of the default tier adopts a holder the
# daemon started ahead of demand. Two workspaces made from standbys are isolated from each
# other as any two are (files, /tmp, processes, network, their own cgroup with the tier's
# limits and memory charged there, their own egress policy); a snapshot workspace can be made
# from one; another tier is not; many concurrent creates never share a standby; a daemon killed
# re-adopts an adopted holder and kills its standbys, a stopped one leaves none; --standby 0
# and the single-workspace mode keep none; the daemon never changes its umask once holders
# are being forked, so they and their commands keep 022; a non-root daemon on a delegated
# subtree renames the cgroups as well.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/isolation_checks.sh"
plan 71

# log lines of standby adoptions: "<workspace> <holder pid> <standby name>"
adoptions() {
    sed -n 's/.*workspace \([^:]*\): adopted standby holder pid \([0-9]*\) (\(_standby-[0-9]*\)).*/\1 \2 \3/p' \
        "$SD_DIR/log"
}
adopted_by() { adoptions | awk -v w="$1" '$1 == w {print $2}'; }
# waits (bounded) until N standbys are ready at once: N "ready" lines since the last adoption
wait_pool() {
    for _ in $(seq 1 150); do
        [ "$(grep -E ': holder pid [0-9]+ ready|adopted standby' "$SD_DIR/log" | tail -n "$1" |
             grep -c ' ready$')" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
memcg() { echo "/sys/fs/cgroup/memory/$SD_CGROUP/$1"; }
holder_of() { jq -r .holder_pid "$SD_STATE/workspaces/$1/meta.json"; }

sd_start --standby 2
like "$(cat "$SD_DIR/log")" "standby holders: 2 kept ready" "--standby 2: the daemon says it keeps two"
wait_pool 2; ok $? "two standbys become ready in the background"
is "$(standby_holder_count "$SD_STATE")" 2 "two standby holders run, none of them a workspace's"
new_ws iso1
new_ws iso2
is "$(adoptions | awk '{print $1}' | sort | tr '\n' ' ')" "iso1 iso2 " "both new workspaces adopted a standby"
is "$(adoptions | awk '{print $2}' | sort -u | wc -l) $(adoptions | awk '{print $3}' | sort -u | wc -l)" "2 2" \
   "each its own holder and its own standby"
is "$(holder_of iso1) $(holder_of iso2)" "$(adopted_by iso1) $(adopted_by iso2)" \
   "meta.json records the adopted holder of each"
is "$(workspace_holder_names "$SD_STATE" | tr '\n' ' ')" "iso1 iso2 " \
   "each holder's sandbox now has its own workspace's directory at /workspace"

# every isolation property, between two workspaces made from standbys
EXPECT_UID=$(id -u nobody)
isolation_checks
r=$(run_sh iso1 'sleep 30 & echo $!; ls /proc | grep -c "^[0-9]"')
r2=$(run_sh iso2 'ps -eo args | grep -c "[s]leep 30"')
is "$(stdout_of "$r2")" 0 "a process of one is not visible in the other (pid namespaces)"
for w in iso1 iso2; do
    grep -qx "$(holder_of $w)" "$(memcg $w)/cgroup.procs" || { ok 1 "$w's holder is in its own cgroup"; continue; }
    ok 0 "$w's holder is in its own renamed cgroup"
done
is "$(cat "$(memcg iso1)/memory.limit_in_bytes") $(cat "/sys/fs/cgroup/pids/$SD_CGROUP/iso1/pids.max")" \
   "2147483648 512" "its group has the standard tier's memory and pids limits"
before2=$(cat "$(memcg iso2)/memory.usage_in_bytes")
run_sh iso1 'head -c 64M /dev/zero > /tmp/fill' >/dev/null
used1=$(cat "$(memcg iso1)/memory.usage_in_bytes"); used2=$(cat "$(memcg iso2)/memory.usage_in_bytes")
ok $(( ! (used1 >= 64 << 20 && used2 - before2 < 32 << 20) )) \
   "memory written in one is charged to its own group ($used1 bytes), not the other's ($before2 -> $used2)"
test ! -e "$(memcg _standby-1)" && test ! -e "$SD_STATE/workspaces/_standby-1"; ok $? \
   "the adopted standby's cgroup and directory names are gone"

# the workspace's own egress policy: none has no proxy, open has one
probe='import socket
try:
  socket.create_connection(("127.0.0.1",3128),timeout=2); print("proxy")
except OSError: print("none")'
wait_standby_ready
new_ws eg-open '{"network":"open"}'
like "$(adoptions | awk '$1 == "eg-open"')" "eg-open" "a workspace with network open adopts a standby"
is "$(stdout_of "$(exec_json eg-open "$(jq -nc --arg p "$probe" '{argv:["python3","-c",$p]}')")")" proxy \
   "and gets its egress proxy"
is "$(stdout_of "$(exec_json iso1 "$(jq -nc --arg p "$probe" '{argv:["python3","-c",$p]}')")")" none \
   "while a standby workspace with network none has none"

# a snapshot workspace can be made from a standby
api PUT "/v1/workspaces/iso1/files?path=from-snapshot" "snapshot-content" >/dev/null
r=$(api PUT /v1/snapshots/snap1 '{"workspace":"iso1"}')
is "$(status)" 200 "a snapshot of a standby workspace is captured"
wait_standby_ready
new_ws fromsnap '{"snapshot":"snap1"}'
like "$(adoptions | awk '$1 == "fromsnap"')" fromsnap "a workspace on a snapshot adopts a standby"
is "$(stdout_of "$(run_sh fromsnap 'cat /workspace/from-snapshot; echo x > /workspace/new')")" snapshot-content \
   "and sees the snapshot's files at /workspace"
test ! -e "$SD_STATE/workspaces/iso1/files/new"; ok $? "its writes stay its own"

# another tier starts a holder of its own
wait_standby_ready
new_ws small1 '{"size":"small"}'
is "$(adopted_by small1)" "" "a workspace of another tier does not take a standby"
is "$(cat "$(memcg small1)/memory.limit_in_bytes")" 536870912 "and has its own tier's limit"

# many concurrent creates: a standby is never handed to two
pids=()
for i in $(seq 1 16); do api PUT "/v1/workspaces/c$i" > "$SD_DIR/c$i.out" & pids+=($!); done
wait "${pids[@]}"
is "$(for i in $(seq 1 16); do jq -r .created "$SD_DIR/c$i.out"; done | sort | uniq -c | awk '{print $1, $2}')" "16 true" \
   "16 concurrent creates all succeed"
is "$(adoptions | awk '{print $3}' | sort | uniq -d)$(adoptions | awk '{print $2}' | sort | uniq -d)" "" \
   "no standby and no holder pid was adopted twice ($(adoptions | grep -c '^c') of the 16 took one)"
is "$(workspace_holder_names "$SD_STATE" | grep '^c' | uniq -d)" "" "no workspace shares a holder"
is "$(workspace_holder_names "$SD_STATE" | grep -c '^c')" 16 "every one has a holder showing its own directory"
for i in $(seq 1 16); do api DELETE "/v1/workspaces/c$i" >/dev/null; done

# a killed daemon: the adopted holder is re-adopted, the standbys of that run are killed
wait_pool 2
old_standbys=$(grep -E ': holder pid [0-9]+ ready' "$SD_DIR/log" | tail -2 | sed 's/.*holder pid \([0-9]*\) ready/\1/')
iso1_holder=$(holder_of iso1)
kill -KILL "$SD_PID"; wait "$SD_PID" 2>/dev/null
sd_launch
like "$(grep 'workspace iso1: re-adopted' "$SD_DIR/log" | tail -1)" "re-adopted holder pid $iso1_holder" \
   "a restarted daemon re-adopts the holder iso1 took from the pool"
is "$(stdout_of "$(run_sh iso1 'cat /workspace/from-snapshot')")" snapshot-content "and iso1 still works"
alive=""   # a killed one may stay a zombie until init reaps it: the daemon that started it is gone
for p in $old_standbys; do st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ] && alive="$alive $p"; done
is "$alive" "" "the previous run's standbys were killed"
like "$(grep 'killed stray holder' "$SD_DIR/log")" "_standby-" "and the log says so"

# a stopped daemon leaves no standby behind
wait_pool 2
sd_stop
is "$(standby_holder_count "$SD_STATE")" 0 "after SIGTERM no standby holder runs"
is "$(ls -A "$SD_STATE/workspaces" | grep -c '^_standby-') $(ls -d /sys/fs/cgroup/*/"$SD_CGROUP"/_standby-* 2>/dev/null | wc -l)" \
   "0 0" "and no standby directory or cgroup is left"
is "$(workspace_holder_names "$SD_STATE" | grep -c iso1)" 1 "while the workspaces stay alive for the next start"

# --standby 0 keeps none
SD_ARGS+=(--standby 0)
sd_launch
like "$(tail -n 20 "$SD_DIR/log")" "standby holders: off" "--standby 0 turns the pool off"
new_ws plain
is "$(adopted_by plain)" "" "and a new workspace starts its own holder"
is "$(standby_holder_count "$SD_STATE")" 0 "no standby runs"
sd_stop

# the single-workspace mode keeps none
sd_start --single-workspace only
like "$(cat "$SD_DIR/log")" "standby holders: off" "the single-workspace mode keeps no standby"
sd_stop

# umask is the whole process's: the daemon sets it once, at start, before any thread or child,
# and never again (a mask set for a moment while the pool's holders are forked would be theirs)
mkdir -m 711 "$SD_DIR/um"
# a cgroup name of its own, removed on exit (the default, mesh-sandboxd, would stay behind)
SD_CGROUPS+=("mesh-test-$$-um")
strace -f -qq -e trace=umask,execve -o "$SD_DIR/um/trace" \
    "$SANDBOXD" --state-dir "$SD_DIR/um/state" --socket "$SD_DIR/um/s" --standby 2 \
    --cgroup-name "mesh-test-$$-um" 2>"$SD_DIR/um/log" &
tracer=$!
served=1
for _ in $(seq 1 100); do
    curl -s -m 2 --unix-socket "$SD_DIR/um/s" http://sd/v1/capabilities >/dev/null 2>&1 && { served=0; break; }
    sleep 0.1
done
ok $served "a daemon traced for its umask calls serves" || diag "$(tail -3 "$SD_DIR/um/log")"
pkill -TERM -f -- "--state-dir $SD_DIR/um/state"
wait "$tracer"
# the daemon's calls: those of its own process and threads, not of its children, each of which
# executes a program (bwrap's child sets a mask of its own before it executes the agent)
daemon_umasks() {
    awk 'NR == 1 { root = $1 } /execve\(/ && $1 != root { execd[$1] = 1 }
         / umask\(/ { pid[++n] = $1; call[n] = $2 }
         END { for (i = 1; i <= n; i++) if (!(pid[i] in execd)) print call[i] }' "$1" | tr '\n' ' '
}
is "$(daemon_umasks "$SD_DIR/um/trace")" \
   "umask(022) " \
   "the daemon sets its umask once, at start, and no thread changes it while holders are forked"

# non-root on a delegated subtree (the embedded daemon's way): cgroups are renamed too
if id postgres >/dev/null 2>&1; then
    sd_prepare_as postgres
    CG="mesh-test-$$-$RANDOM"; SD_CGROUP=$CG; SD_CGROUPS+=("$CG")
    "$SANDBOXD" --setup-host postgres --state-dir "$SD_STATE" --cgroup-name "$CG" > "$SD_DIR/setup.out" 2>&1
    # four standbys start in the background while the daemon binds its socket: the socket's
    # mode once came from a umask() of the whole process, which a holder forked meanwhile
    # kept, with its commands' files (a directory made 0600 could not be written)
    SD_ARGS+=(--standby 4)
    sd_launch_as postgres
    wait_pool 4
    masks=$(for h in $(pgrep -f "bwrap .*$SD_STATE/workspaces/"); do
                for p in $h $(pgrep -P "$h") $(pgrep -P "$(pgrep -P "$h" | head -1)" 2>/dev/null); do
                    awk '/^Umask:/ {print $2}' "/proc/$p/status" 2>/dev/null
                done
            done | sort | uniq -c | awk '{print $2 "x" $1}' | tr '\n' ' ')
    like "$masks" "^0022x[0-9]+ $" "every standby holder and agent started beside the socket's bind has umask 022"
    new_ws d1
    like "$(adopted_by d1)" "^[0-9]+$" "as postgres, a new workspace adopts a standby"
    grep -qx "$(holder_of d1)" "/sys/fs/cgroup/memory/$CG/d1/cgroup.procs"; ok $? \
       "its holder is in its own renamed cgroup of the delegated subtree"
    is "$(cat "/sys/fs/cgroup/memory/$CG/d1/memory.limit_in_bytes")" 2147483648 "with the tier's limit"
    r=$(run_sh d1 'umask; mkdir -p a/b && echo x > a/b/f && stat -c %a a/b a/b/f')
    is "$(stdout_of "$r")" "$(printf '0022\n755\n644')" "its commands run with umask 022: the files they make are theirs to write"
else
    skip "no postgres user" 5
fi
finish
