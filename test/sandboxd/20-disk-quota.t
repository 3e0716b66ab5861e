#!/bin/bash
# Per-workspace disk quotas and inotify bounds on a host prepared by --setup-host (defaults but
# the image's size), the daemon as postgres: a workspace that fills its quota gets EDQUOT inside
# and its answer says disk_quota while another keeps writing; many small files meet the same
# bound; release empties the slot and a next workspace gets the whole quota; no way out of the
# quota from inside (new subvolumes, snapshots, raising the limit, the files API, an overlay on
# a snapshot); inotify instances and watches stop at the tier's bound in one workspace while
# another still gets one; a host prepared without quotas is declared as such.
. "$(dirname "$0")/lib.sh"
id postgres >/dev/null 2>&1 || skip_all "no postgres user"
[ -d /sys/fs/cgroup/memory ] || skip_all "no cgroup v1 memory hierarchy on this host"
[ -x /usr/sbin/mkfs.btrfs ] || skip_all "no mkfs.btrfs (btrfs-progs)"
plan 37
MiB=$((1 << 20))
sd_prepare_as postgres
CG="mesh-test-$$-$RANDOM"
SD_CGROUPS+=("$CG")
"$SANDBOXD" --setup-host postgres --state-dir "$SD_STATE" --cgroup-name "$CG" \
    --disk-bytes $((128 * MiB)) > "$SD_DIR/setup.out" 2>&1
ok $? "--setup-host prepares the host with disk quotas"
like "$(cat "$SD_DIR/setup.out")" "disk quotas: 128 slots per tier" "and says how many workspaces per tier they hold"
ok $(( ! ($(cat /proc/sys/fs/inotify/max_user_instances) >= 8192) )) \
   "it raises the host's per-user inotify instances (all workspaces share one uid) to 8192 or more"
sd_launch_as postgres
caps=$(api GET /v1/capabilities)
is "$(field "$caps" '[.capabilities.disk_limits,.capabilities.disk_quota]|map(tostring)|join(",")')" "true,true" \
   "the daemon as postgres declares disk_limits and disk_quota"
# each tier's own size, but never more than a quarter of the 128 MiB filesystem
LIMIT=$((32 * MiB))
is "$(field "$caps" '[.tiers[].disk_bytes]|map(tostring)|join(",")')" "$LIMIT,$LIMIT,$LIMIT,$LIMIT" \
   "every tier's quota is its size capped at a quarter of the filesystem"
is "$(field "$caps" '.tiers.small|[.inotify_instances,.inotify_watches]|map(tostring)|join(",")')" "32,8192" \
   "the small tier's inotify bounds are declared"

# --- one workspace fills its quota, another keeps writing ---
new_ws a '{"size":"small"}'
new_ws b '{"size":"small"}'
r=$(run_sh a 'dd if=/dev/zero of=big bs=1M count=100 2>&1; echo rc=$?')
like "$(stdout_of "$r")" "Disk quota exceeded" "filling /workspace stops with EDQUOT inside the workspace"
written=$(run_sh a 'stat -c %s big'); written=$(stdout_of "$written")
ok $(( ! (written > LIMIT - 4 * MiB && written <= LIMIT) )) "it stopped at its quota ($written of $LIMIT bytes)"
is "$(field "$r" .disk_quota)" true "the exec's answer says disk_quota"
r=$(run_sh a 'echo more >> big; echo rc=$?')
is "$(field "$r" .disk_quota)" "true" "a later command of the full workspace says disk_quota too"
r=$(run_sh b 'dd if=/dev/zero of=mine bs=1M count=16 2>&1 && stat -c %s mine')
is "$(stdout_of "$r" | tail -1) $(field "$r" .disk_quota)" "$((16 * MiB)) false" \
   "another workspace writes 16 MiB meanwhile, and its answer says no disk_quota"
r=$(api PUT "/v1/workspaces/a/files?path=put.txt" "@/etc/services")
is "$(status)" 507 "the files API cannot write past the quota either"
is "$(err_code "$r")" disk_quota "and says disk_quota"

# --- no way out of the slot from inside ---
escape=$(cat <<'PY'
import fcntl, os, struct, sys
def ioc(dir_, nr, size): return (dir_ << 30) | (size << 16) | (0x94 << 8) | nr
W, RW = 1, 3
tries = {"subvol_create": ioc(W, 14, 4096), "subvol_create_v2": ioc(W, 24, 4096),
         "snap_create": ioc(W, 1, 4096), "snap_create_v2": ioc(W, 23, 4096),
         "qgroup_limit": (2 << 30) | (48 << 16) | (0x94 << 8) | 43}
fd = os.open("/workspace", os.O_RDONLY | os.O_DIRECTORY)
for name, req in tries.items():
    buf = bytearray(4096 if name != "qgroup_limit" else 48)
    if name.startswith("snap"):
        struct.pack_into("q", buf, 0, fd)
    buf[8:14] = b"escape" if name != "qgroup_limit" else buf[8:14]
    try:
        fcntl.ioctl(fd, req, buf)
        print(name, "ALLOWED")
    except OSError as e:
        print(name, os.strerror(e.errno))
PY
)
r=$(exec_json b "$(jq -nc --arg s "$escape" '{argv:["python3","-c",$s]}')")
out=$(stdout_of "$r")
is "$(echo "$out" | grep -c "Operation not permitted")" 5 \
   "no subvolume, snapshot or quota-limit ioctl works inside ($(echo "$out" | tr '\n' ';'))"
r=$(run_sh b 'ls -d /workspace/escape 2>&1; ln mine /tmp/mine 2>&1; echo rc=$?')
like "$(stdout_of "$r" | tr '\n' ' ')" "No such file.*cross-device.*rc=1" \
   "nothing was made, and a hard link out of /workspace fails"

# --- many small files meet the same bound: 1500-byte files live in the filesystem's metadata
# (inline), and so do their names and inodes ---
new_ws c '{"size":"small"}'
files=$(cat <<'PY'
import os
n, data = 0, b"x" * 1500
try:
    while n < 1000000:
        fd = os.open(("%d-" % n).ljust(100, "x"), os.O_CREAT | os.O_WRONLY)
        os.write(fd, data)
        os.close(fd)
        n += 1
except OSError as e:
    print(n, e.errno)
PY
)
r=$(exec_json c "$(jq -nc --arg s "$files" '{argv:["python3","-c",$s],timeout_ms:600000}')")
set -- $(stdout_of "$r")
is "${2:-none}" 122 "creating small files stops with EDQUOT (${1:-no} files): metadata counts"
ok $(( ! (${1:-0} > 1000 && ${1:-0} < 1000000) )) "after a bounded number of them"
is "$(field "$r" .disk_quota)" true "and the answer says disk_quota"
r=$(run_sh b 'echo still > ok2 && cat ok2')
is "$(stdout_of "$r")" still "the other workspace still writes"

# --- release empties the slot; a next workspace gets the whole quota ---
free_before=$(ls "$SD_STATE/workspaces/.quota/small" | wc -l)
api DELETE /v1/workspaces/a > /dev/null
# removing c's thousands of files may outlast one call's timeout on a loaded host: wait for it
api DELETE /v1/workspaces/c > /dev/null
for _ in $(seq 1 600); do
    [ "$(ls "$SD_STATE/workspaces/.quota/small" | wc -l)" -ge $((free_before + 2)) ] && break
    sleep 0.5
done
is "$(ls "$SD_STATE/workspaces/.quota/small" | wc -l)" $((free_before + 2)) "release returns both slots to the small tier's pool"
is "$(find "$SD_STATE/workspaces/.quota/small" -mindepth 2 | wc -l)" 0 "emptied"
new_ws d '{"size":"small"}'
r=$(run_sh d 'dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; stat -c %s big')
got=$(stdout_of "$r")
ok $(( ! (got > LIMIT - 4 * MiB) )) "a next workspace fills a whole quota again ($got bytes): the blocks were freed"
api DELETE /v1/workspaces/d > /dev/null

# --- a workspace on a snapshot: its overlay's writes count too, copy-ups work ---
run_sh b 'echo base > kept.txt' > /dev/null
api PUT /v1/snapshots/s1 '{"workspace":"b"}' > /dev/null
r=$(api PUT /v1/workspaces/e '{"size":"small","snapshot":"s1"}')
is "$(status)" 200 "a workspace starts from a snapshot"
r=$(run_sh e 'echo changed >> kept.txt && cat kept.txt; dd if=/dev/zero of=big bs=1M count=100 2>&1 | grep -o "Disk quota exceeded"')
is "$(stdout_of "$r" | tr '\n' ' ')" "base changed Disk quota exceeded " \
   "it changes a snapshot file (copy-up inside its slot) and its own writes stop at the quota"
is "$(field "$r" .disk_quota)" true "with disk_quota in its answer"

# --- inotify: bounded per workspace, not per host user ---
inotify=$(cat <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
mode = sys.argv[1]
if mode == "instances":
    n = 0
    while n < 100000 and libc.inotify_init() >= 0:
        n += 1
    print(n, ctypes.get_errno())
else:
    fd = libc.inotify_init()
    os.mkdir("w")
    n = 0
    while n < 100000:
        p = "w/%d" % n
        open(p, "w").close()
        if libc.inotify_add_watch(fd, p.encode(), 2) < 0:
            break
        n += 1
    print(n, ctypes.get_errno())
PY
)
r=$(exec_json b "$(jq -nc --arg s "$inotify" '{argv:["python3","-c",$s,"instances"]}')")
is "$(stdout_of "$r")" "32 24" "inotify instances stop at the small tier's 32 (EMFILE)"
r=$(exec_json b "$(jq -nc --arg s "$inotify" '{argv:["python3","-c",$s,"watches"]}')")
is "$(stdout_of "$r")" "8192 28" "inotify watches stop at the small tier's 8192 (ENOSPC)"
exec_json b "$(jq -nc --arg s "import ctypes,time\nl=ctypes.CDLL(None)\nfds=[l.inotify_init() for _ in range(40)]\nopen('/workspace/held','w').close()\ntime.sleep(4)" '{argv:["python3","-c",$s]}')" > /dev/null &
hp=$!
for _ in $(seq 1 50); do [ -n "$(stdout_of "$(run_sh b 'ls held 2>/dev/null')")" ] && break; sleep 0.1; done
r=$(exec_json e "$(jq -nc --arg s "$inotify" '{argv:["python3","-c",$s,"instances"]}')")
is "$(stdout_of "$r")" "32 24" "while one workspace holds all of its instances, another still gets its own 32"
wait $hp
r=$(run_sh b 'echo 100000 > /proc/sys/user/max_inotify_instances 2>&1; echo rc=$?')
like "$(stdout_of "$r")" "rc=[12]" "a workspace cannot raise its own inotify bound"

# --- slots run out: a clear refusal, not an unbounded workspace ---
sd_stop TERM
other=$(mktemp -d "$SD_DIR/few.XXXXXX"); chown postgres "$other"; CG2="$CG-few"; SD_CGROUPS+=("$CG2")
"$SANDBOXD" --setup-host postgres --state-dir "$other" --cgroup-name "$CG2" --disk-bytes $((128 * MiB)) \
    --quota-slots 1 > "$SD_DIR/setup2.out" 2>&1
ok $? "--quota-slots 1 prepares a host with one slot per tier"
sd_start_as postgres --state-dir "$other" --standby 0
new_ws f1 '{"size":"small"}'
r=$(api PUT /v1/workspaces/f2 '{"size":"small"}')
is "$(status) $(err_code "$r")" "507 disk_quota_slots" "a second small workspace is refused: disk_quota_slots"
like "$(field "$r" .error.message)" "quota-slots" "the message says how to get more"
api PUT /v1/workspaces/f3 '{"size":"large"}' > /dev/null
is "$(status)" 200 "a workspace of another tier still gets its own slot"

# --- a host prepared without quotas (an older --setup-host: ext4) says so ---
sd_stop TERM
old=$(mktemp -d "$SD_DIR/old.XXXXXX"); chown postgres "$old"
mkdir "$old/workspaces"
fallocate -l $((64 * MiB)) "$old/workspaces.img"
mkfs.ext4 -q -F -E root_owner=$(id -u postgres):$(id -g postgres) "$old/workspaces.img"
mount -o loop "$old/workspaces.img" "$old/workspaces"
rmdir "$old/workspaces/lost+found"
jq -nc --arg img "$old/workspaces.img" --arg cg "$CG2" '{user:"postgres",cgroup_name:$cg,disk_image:$img,disk_bytes:67108864}' > "$old/host.json"
sd_start_as postgres --state-dir "$old" --standby 0
is "$(field "$(api GET /v1/capabilities)" '[.capabilities.disk_limits,.capabilities.disk_quota]|map(tostring)|join(",")')" "true,false" \
   "on an ext4 image of an older set-up: disk_limits true, disk_quota false"
like "$(cat "$SD_DIR/log")" "no per-workspace disk quotas" "and the daemon logs the gap"
sd_stop TERM
"$SANDBOXD" --setup-host postgres --state-dir "$old" --cgroup-name "$CG2" --disk-bytes $((64 * MiB)) > "$SD_DIR/setup3.out" 2>&1
is "$?" 1 "--setup-host on it reports the host incomplete"
like "$(cat "$SD_DIR/setup3.out")" "not a btrfs filesystem.*run --setup-host again" "and says how to remake the image"
finish
