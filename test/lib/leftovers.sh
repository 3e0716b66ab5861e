#!/usr/bin/env bash
# test/lib/leftovers.sh: what a test run leaves behind. Sourced by test/run.sh: leftovers_begin
# gives the run an id (MESH_TEST_RUN, exported: every process the suites start inherits it in
# its environment) and notes the mesh cgroups and mounts already there; leftovers_check, once
# the run stopped its own cluster and doubles, prints "not ok - leftovers: ..." for each
# process still carrying the id, each mesh cgroup (/sys/fs/cgroup/*/mesh-*, the daemon's
# default mesh-sandboxd among them) and each mount the run made that is still there, and fails
# when there is any. (On a machine where another run goes on at the same time, its new cgroups
# and mounts are reported too: CI runs alone.)

# leftovers_begin: the run id and the state before the run
leftovers_begin() {
    export MESH_TEST_RUN=${MESH_TEST_RUN:-run-$$-$(date +%s)}
    LEFTOVERS_DIR=$(mktemp -d /tmp/mesh-leftovers.XXXXXX)
    leftovers_cgroups > "$LEFTOVERS_DIR/cgroups.before"
    leftovers_mounts > "$LEFTOVERS_DIR/mounts.before"
}

# leftovers_cgroups: the mesh cgroups, one path a line, sorted
leftovers_cgroups() {
    find /sys/fs/cgroup/*/ -mindepth 1 -maxdepth 1 -type d -name 'mesh-*' 2>/dev/null | sort
}

# leftovers_mounts: the mount points under /tmp (where every test makes its directories), sorted
leftovers_mounts() {
    awk '$2 ~ /^\/tmp\// { print $2 }' /proc/mounts | sort -u
}

# leftovers_procs: "PID COMMAND" of each process whose environment carries this run's id, but
# for this shell, its ancestors and the processes of this check (LEFTOVERS_CHECKING in theirs)
leftovers_procs() {
    local pid p env mine=" $$ " tag="MESH_TEST_RUN=$MESH_TEST_RUN"
    p=$$
    while [ "${p:-0}" -gt 1 ]; do p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null); mine+="${p:-0} "; done
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        case "$mine" in *" $pid "*) continue ;; esac
        env=$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null) || continue
        grep -qxF "$tag" <<<"$env" || continue
        grep -qx "LEFTOVERS_CHECKING=1" <<<"$env" && continue
        echo "$pid $({ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-160)"
    done
}

# leftovers_check: prints a "not ok - leftovers: ..." line for each, exit status 1 when any
leftovers_check() {
    local found=0 line
    while read -r line; do
        [ -n "$line" ] || continue
        echo "not ok - leftovers: process $line"; found=1
    done < <(LEFTOVERS_CHECKING=1 leftovers_procs)
    while read -r line; do
        echo "not ok - leftovers: cgroup $line ($(wc -l < "$line/cgroup.procs" 2>/dev/null || echo ?) processes)"; found=1
    done < <(leftovers_cgroups | comm -13 "$LEFTOVERS_DIR/cgroups.before" -)
    while read -r line; do
        echo "not ok - leftovers: mount $line"; found=1
    done < <(leftovers_mounts | comm -13 "$LEFTOVERS_DIR/mounts.before" -)
    [ "$found" -eq 0 ] && echo "# leftovers: no process, cgroup or mount of run $MESH_TEST_RUN is left"
    rm -rf "$LEFTOVERS_DIR"
    return "$found"
}
