#!/bin/bash
# Release tells the truth: a destroyed workspace's files are gone at any depth and width (a
# tree deeper than PATH_MAX, 10000 sibling directories, unreadable and read-only directories,
# symlinks that point out), also for a non-root daemon; when something cannot be removed
# (here a mount the test puts inside the workspace) the answer is 500 release_incomplete,
# never "destroyed", nothing beyond the mount point is touched, and a later release finishes
# the job.
. "$(dirname "$0")/lib.sh"
plan 16

# deep_tree WS DEPTH [LINK]: DEPTH nested directories (one file each) made inside the workspace
# with descriptors, as a hostile command would, ending in a symlink to LINK (a host path), a
# mode-0 directory and a read-only one; prints the depth it reached
deep_tree() {
    run_sh "$1" "python3 -c '
import os
fd = os.open(\"/workspace\", os.O_RDONLY)
for i in range($2):
    os.mkdir(\"d\", dir_fd=fd)
    n = os.open(\"d\", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = n
    os.close(os.open(\"f\", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
os.symlink(\"${3:-/etc}\", \"out\", dir_fd=fd)
os.mkdir(\"locked\", dir_fd=fd)
os.close(os.open(\"locked/f\", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
os.chmod(\"locked\", 0, dir_fd=fd)
os.fchmod(fd, 0o500)
print(i + 1)
'"
}

sd_start
trap 'umount "$SD_STATE/workspaces/stuck/files/m" 2>/dev/null; sd_cleanup' EXIT
mkdir "$SD_DIR/outside" && echo precious > "$SD_DIR/outside/keep"
new_ws deep
r=$(deep_tree deep 3000 "$SD_DIR/outside")
is "$(stdout_of "$r")" 3000 "a 3000-deep tree is made inside the workspace"
files=$(find "$SD_STATE/workspaces/deep/files" -name f | wc -l)
is "$files" 3001 "it is on disk (deeper than PATH_MAX)"
r=$(api DELETE /v1/workspaces/deep)
is "$(status) $(field "$r" .outcome)" "200 destroyed" "release answers destroyed"
test ! -e "$SD_STATE/workspaces/deep"; ok $? "and nothing of the workspace is left on disk"
test -e "$SD_DIR/outside/keep"; ok $? "a symlink to a host directory was not followed"

# wide as well as deep: 10000 directories with a file each, beside the deep tree's shape
new_ws wide
r=$(run_sh wide "python3 -c '
import os
for i in range(10000):
    os.mkdir(\"d%d\" % i)
    open(\"d%d/f\" % i, \"w\").close()
print(len(os.listdir(\".\")))'")
is "$(stdout_of "$r")" 10000 "a wide tree is made inside the workspace"
r=$(api DELETE /v1/workspaces/wide)
is "$(status) $(field "$r" .outcome)" "200 destroyed" "release answers destroyed"
test ! -e "$SD_STATE/workspaces/wide"; ok $? "and the wide tree is gone"

# removal fails: a mount inside the workspace (content that is not the workspace's own)
new_ws stuck
run_sh stuck 'mkdir -p m && echo mine > own.txt' >/dev/null
mount -t tmpfs -o size=1m mesh-test "$SD_STATE/workspaces/stuck/files/m"
touch "$SD_STATE/workspaces/stuck/files/m/keep"
r=$(api DELETE /v1/workspaces/stuck)
is "$(status) $(err_code "$r")" "500 release_incomplete" "a release that cannot remove everything says so"
like "$(field "$r" .error.message)" "could not be removed.*retry" "its message says what is left to do"
test -e "$SD_STATE/workspaces/stuck/files/m/keep"; ok $? "nothing beyond a mount point is removed"
r=$(api GET /v1/workspaces/stuck)
is "$(status) $(field "$r" .state)" "200 hibernated" "the workspace stays known (stopped), so it can be released again"
grep -q "stuck: release incomplete" "$SD_DIR/log"; ok $? "the daemon logs the incomplete release"
umount "$SD_STATE/workspaces/stuck/files/m"
r=$(api DELETE /v1/workspaces/stuck)
is "$(status) $(field "$r" .outcome)" "200 destroyed" "the retry destroys it"
test ! -e "$SD_STATE/workspaces/stuck"; ok $? "and its directory is gone"

# a non-root daemon (the embedded case) owns what the sandbox made: mode-0 and read-only
# directories do not stop it
if id postgres >/dev/null 2>&1; then
    sd_start_as postgres
    new_ws deep2
    deep_tree deep2 300 >/dev/null
    api DELETE /v1/workspaces/deep2 >/dev/null
    test ! -e "$SD_STATE/workspaces/deep2"; ok $? "non-root: unreadable and read-only directories are removed too"
else
    skip "no postgres user"
fi
finish
