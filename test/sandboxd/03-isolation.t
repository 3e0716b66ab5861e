#!/bin/bash
# Isolation of workspaces with a root daemon (sandboxes run as nobody).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/isolation_checks.sh"
plan 29
sd_start
new_ws iso1
new_ws iso2
EXPECT_UID=$(id -u nobody)
isolation_checks
r=$(run_sh iso1 'cat /proc/self/cgroup')
# control: the daemon's cgroup is there on the host, and the sandbox reads its own cgroup file
[ -d "/sys/fs/cgroup/memory/$SD_CGROUP" ] && [ -n "$(stdout_of "$r")" ]
ok $? "control: the daemon's cgroup $SD_CGROUP exists on the host and /proc/self/cgroup reads inside"
ok $(echo "$(stdout_of "$r")" | grep -q "$SD_CGROUP"; echo $((! $?))) "the host's cgroup layout is not visible (cgroup namespace)"
finish
