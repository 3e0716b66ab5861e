/*
 * quota.c - per-workspace bounds on shared kernel resources: disk (btrfs quota groups on the
 * workspaces' filesystem) and inotify (the sandbox's own user namespace).
 *
 * Disk. The daemon runs unprivileged, and every kind of quota needs a privileged call to set a
 * limit, so --setup-host (root) makes the limits ahead of time: on the workspaces' btrfs
 * filesystem (hostsetup.c) it enables quota groups and makes, per size tier, a pool of
 * subvolumes ("slots") under <workspaces>/.quota/<tier>/<n>, each with the tier's byte limit on
 * its quota group. A new workspace takes a free slot of its tier by renaming it to
 * <workspaces>/<id>/store (an atomic rename with RENAME_NOREPLACE: two requests never take one
 * slot); its files/ and, on a snapshot, overlayfs' work/ live inside it, so the workspace's
 * writes, overlay copy-ups included, are charged to the slot. Release empties the slot and
 * renames it back into the pool whose tier has its limit. A subvolume's limit counts data and
 * metadata (inodes, directories, inline files) alike, so many small files meet the same bound
 * as one big one. Nothing in a sandbox can move its files out of the slot: a rename or link
 * across subvolumes is EXDEV, the system-call filter refuses the ioctls that make subvolumes
 * and snapshots (seccomp.c; a new subvolume would have a quota group of its own), and the
 * quota-group ioctls need CAP_SYS_ADMIN in the host's namespace.
 * Why btrfs and not ext4/XFS project quotas: this project's kernels ship ext4 without
 * CONFIG_QFMT_V2 (ext4 refuses to mount a filesystem with the quota feature) and XFS without
 * CONFIG_XFS_QUOTA; btrfs quota groups are built in. docs/sandboxd.md has the measurements.
 *
 * Usage is read without privilege from sysfs (/sys/fs/btrfs/<fsid>/qgroups/0_<subvol>/), so
 * an exec's answer says disk_quota when its workspace is at its limit at the end.
 *
 * Inotify. The kernel bounds inotify instances and watches per user and per user namespace,
 * each level within its parent's. Every workspace runs as one uid, but in a user namespace of
 * its own (bubblewrap's): quota_inotify_bound writes the tier's bound into that namespace's
 * /proc/sys/user/max_inotify_{instances,watches} from a helper that joins it (the daemon's user
 * owns it, so the helper has CAP_SYS_RESOURCE there; nothing inside the sandbox has).
 */
#include "quota.h"
#include "config.h"
#include "layout.h"
#include "log.h"
#include "registry.h"
#include "tiers.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4   /* kernels >= 6.7 */
#endif

/* At most this many tiers (capabilities.c's table has four). */
#define QUOTA_TIERS 8

/* A workspace within this much of its limit is full: a write that fails short of the limit
 * (the next block, or a 1 MiB buffer, does not fit) leaves it there. */
#define QUOTA_FULL_SLACK (1u << 20)

/* What this daemon found at start; read-only afterwards. */
static struct {
    bool layout;                    /* workspaces live in slots (pool found, btrfs, quota on) */
    uint64_t bytes[QUOTA_TIERS];    /* per tier (table order): its slots' limit */
    unsigned slots;                 /* per tier */
    char sysfs[128];                /* /sys/fs/btrfs/<fsid>/qgroups */
} quota;

/* A hint per tier: the slot index to try first (any value is correct, a good one is fast). */
static unsigned next_slot[QUOTA_TIERS];

/* Index of TIER in the tier table. */
static size_t tier_index(const struct size_tier *tier)
{
    size_t n;
    return (size_t)(tier - tier_table(&n));
}

/* A tier's byte limit on a filesystem of DISK_BYTES: the tier's own, but never more than a
 * quarter of the filesystem, so that no single workspace can fill it. */
uint64_t quota_tier_limit(const struct size_tier *tier, uint64_t disk_bytes)
{
    uint64_t own = (uint64_t)tier->disk_mb << 20, share = disk_bytes / 4;
    return own < share ? own : share;
}

/* <state>/workspaces/.quota/<tier> */
static char *pool_dir(const struct size_tier *tier)
{
    return xasprintf("%s/workspaces/.quota/%s", g_config.state_dir, tier->name);
}

/* ---- install time (root, hostsetup.c) ---- */

/* Creates subvolume NAME in directory PARENT_FD unless it exists; true when it is there. */
static bool subvolume_make(int parent_fd, const char *name)
{
    struct btrfs_ioctl_vol_args args = {0};
    snprintf(args.name, sizeof args.name, "%s", name);
    struct stat st;
    return fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ||
           ioctl(parent_fd, BTRFS_IOC_SUBVOL_CREATE, &args) == 0;
}

/* Sets the limit of the quota group of the subvolume whose root is FD. */
static bool subvolume_limit(int fd, uint64_t bytes)
{
    struct btrfs_ioctl_qgroup_limit_args args = {0};
    args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER | BTRFS_QGROUP_LIMIT_MAX_EXCL;
    args.lim.max_rfer = args.lim.max_excl = bytes;
    return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &args) == 0;
}

/* Makes tier TIER's pool under ROOT_FD (.quota/<tier>/0..slots-1, owned by UID:GID) with
 * BYTES per slot; existing free slots get the limit again (a re-run may change sizes). */
static bool pool_make(int quota_fd, const struct size_tier *tier, unsigned slots, uint64_t bytes,
                      uid_t uid, gid_t gid)
{
    if (mkdirat(quota_fd, tier->name, 0700) != 0 && errno != EEXIST)
        return false;
    int dir = openat(quota_fd, tier->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = dir >= 0 && fchown(dir, uid, gid) == 0;
    for (unsigned n = 0; ok && n < slots; n++) {
        char name[16];
        snprintf(name, sizeof name, "%u", n);
        ok = subvolume_make(dir, name);
        int slot = ok ? openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        ok = slot >= 0 && subvolume_limit(slot, bytes) && fchown(slot, uid, gid) == 0 &&
             fchmod(slot, 0700) == 0;
        if (slot >= 0)
            close(slot);
    }
    if (dir >= 0)
        close(dir);
    return ok;
}

/* Turns quota groups on for the filesystem of FD: simple quotas where the kernel has them
 * (cheaper: no back-reference walk at each commit), full ones otherwise. */
static bool quota_enable(int fd)
{
    struct btrfs_ioctl_quota_ctl_args args = {.cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA};
    if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &args) == 0)
        return true;
    args.cmd = BTRFS_QUOTA_CTL_ENABLE;
    return ioctl(fd, BTRFS_IOC_QUOTA_CTL, &args) == 0;
}

/* --setup-host: quota groups and the slot pools on the btrfs filesystem mounted on
 * MOUNTPOINT of DISK_BYTES; records each tier's limit and the pool size in RECORD. */
bool quota_setup_host(const char *mountpoint, uint64_t disk_bytes, unsigned slots, uid_t uid,
                      gid_t gid, json_t *record)
{
    struct statfs sf;
    int root = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = root >= 0 && fstatfs(root, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC;
    if (!ok) {
        fprintf(stderr, "mesh-sandboxd: %s is not a btrfs filesystem: no per-workspace disk "
                "quotas (release every workspace, unmount it, delete the image and run "
                "--setup-host again to make a new one)\n", mountpoint);
    } else if (!quota_enable(root)) {
        fprintf(stderr, "mesh-sandboxd: cannot enable quota groups on %s: %s\n", mountpoint,
                strerror(errno));
        ok = false;
    }
    int quota_fd = -1;
    if (ok && (mkdirat(root, ".quota", 0711) == 0 || errno == EEXIST))
        quota_fd = openat(root, ".quota", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ok = ok && quota_fd >= 0 && fchown(quota_fd, uid, gid) == 0;
    size_t n;
    const struct size_tier *t = tier_table(&n);
    json_t *limits = json_object();
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t bytes = quota_tier_limit(&t[i], disk_bytes);
        ok = pool_make(quota_fd, &t[i], slots, bytes, uid, gid);
        if (!ok)
            fprintf(stderr, "mesh-sandboxd: cannot make the %s tier's quota slots: %s\n",
                    t[i].name, strerror(errno));
        json_object_set_new(limits, t[i].name, json_integer((json_int_t)bytes));
    }
    if (ok) {
        json_object_set_new(record, "disk_quota", limits);
        json_object_set_new(record, "quota_slots", json_integer(slots));
        printf("disk quotas: %u slots per tier on %s, each bounded by its tier's size\n", slots,
               mountpoint);
    } else {
        json_decref(limits);
    }
    close_fd(&quota_fd);
    close_fd(&root);
    return ok;
}

/* ---- the daemon ---- */

/* Reads the decimal number in FILE under directory DIR; false when missing. */
static bool read_number(const char *dir, const char *file, uint64_t *value)
{
    char *path = xasprintf("%s/%s", dir, file), buf[32];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    free(path);
    if (len <= 0)
        return false;
    buf[len] = '\0';
    *value = strtoull(buf, NULL, 10);
    return true;
}

/* The sysfs quota-group directory of the btrfs filesystem under PATH; false when it is not
 * btrfs or has no quota groups on. */
static bool qgroups_dir(const char *path, char *out, size_t size)
{
    struct statfs sf;
    struct btrfs_ioctl_fs_info_args info;
    memset(&info, 0, sizeof info);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC &&
              ioctl(fd, BTRFS_IOC_FS_INFO, &info) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok)
        return false;
    const unsigned char *u = info.fsid;
    snprintf(out, size, "/sys/fs/btrfs/%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x/qgroups", u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7],
             u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    uint64_t enabled = 0;
    return read_number(out, "enabled", &enabled) && enabled == 1;
}

/* At start (main thread): whether this state dir's workspaces live in quota slots, from what
 * --setup-host recorded and what the filesystem says. Logs the gap when a host prepared
 * without quotas (an older --setup-host, or ext4) leaves workspaces unbounded against each
 * other. */
void quota_init(void)
{
    char *path = xasprintf("%s/host.json", g_config.state_dir);
    char *root = xasprintf("%s/workspaces", g_config.state_dir);
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *limits = json_object_get(doc, "disk_quota");
    size_t n;
    const struct size_tier *t = tier_table(&n);
    bool ok = json_is_object(limits) && n <= QUOTA_TIERS &&
              qgroups_dir(root, quota.sysfs, sizeof quota.sysfs);
    for (size_t i = 0; ok && i < n; i++) {
        json_t *bytes = json_object_get(limits, t[i].name);
        ok = json_is_integer(bytes) && json_integer_value(bytes) > 0;
        quota.bytes[i] = ok ? (uint64_t)json_integer_value(bytes) : 0;
    }
    quota.slots = (unsigned)json_integer_value(json_object_get(doc, "quota_slots"));
    quota.layout = ok && quota.slots > 0;
    if (quota.layout)
        log_event("disk quotas: %u slots per tier (%s)", quota.slots, quota.sysfs);
    else if (json_object_get(doc, "disk_image"))
        log_event("no per-workspace disk quotas: %s was prepared without them (by an older "
                  "mesh-sandboxd --setup-host, or on ext4); one workspace can fill it for all; "
                  "docs/sandboxd.md says how to remake it", root);
    json_decref(doc);
    free(root);
    free(path);
}

/* Whether workspace files live in quota slots (<id>/store); fixed at start. */
bool quota_layout(void)
{
    return quota.layout;
}

/* The byte limit of TIER's slots; 0 without quotas. */
uint64_t quota_tier_bytes(const struct size_tier *tier)
{
    size_t i = tier_index(tier);
    return quota.layout && i < QUOTA_TIERS ? quota.bytes[i] : 0;
}

/* Gives the workspace directory DIR a free slot of TIER as DIR/store (owned by the sandbox
 * user, like the files in it). False with errno EDQUOT when the tier has none free. */
bool quota_slot_take(const struct size_tier *tier, const char *dir)
{
    char *pool = pool_dir(tier);
    char *store = xasprintf("%s/store", dir);
    size_t t = tier_index(tier);
    unsigned start = __atomic_load_n(&next_slot[t], __ATOMIC_RELAXED);
    struct stat st;
    bool ok = lstat(store, &st) == 0;   /* taken already (a retried creation) */
    for (unsigned k = 0; !ok && k < quota.slots; k++) {
        unsigned n = (start + k) % quota.slots;
        char *slot = xasprintf("%s/%u", pool, n);
        ok = renameat2(AT_FDCWD, slot, AT_FDCWD, store, RENAME_NOREPLACE) == 0;
        if (ok)
            __atomic_store_n(&next_slot[t], (n + 1) % quota.slots, __ATOMIC_RELAXED);
        free(slot);
    }
    if (!ok)
        errno = EDQUOT;
    else if (g_config.is_root && chown(store, g_config.sandbox_uid, g_config.sandbox_gid) != 0)
        ok = false;
    free(store);
    free(pool);
    return ok;
}

/* The sysfs directory of the quota group of the subvolume whose root is PATH; NULL when
 * unknown. */
static char *slot_qgroup(const char *path)
{
    struct btrfs_ioctl_ino_lookup_args args;
    memset(&args, 0, sizeof args);
    args.objectid = BTRFS_FIRST_FREE_OBJECTID;   /* unprivileged: only the subvolume's id */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = fd >= 0 && ioctl(fd, BTRFS_IOC_INO_LOOKUP, &args) == 0;
    if (fd >= 0)
        close(fd);
    return ok ? xasprintf("%s/0_%llu", quota.sysfs, (unsigned long long)args.treeid) : NULL;
}

/* Empties the slot STORE (everything in it, never the subvolume itself: an rmdir would delete
 * it with its limit). */
static bool slot_empty(const char *store)
{
    DIR *d = opendir(store);
    struct dirent *e;
    bool ok = d != NULL;
    while (ok && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *entry = xasprintf("%s/%s", store, e->d_name);
        ok = remove_tree(entry);
        free(entry);
    }
    if (d)
        closedir(d);
    return ok;
}

/* Puts the emptied slot STORE back into a pool of a tier whose limit it has, where a name is
 * free (tiers with one limit, as on a small filesystem, share their slots). */
static bool slot_to_pool(const char *store)
{
    char *qgroup = slot_qgroup(store);
    uint64_t limit = 0;
    bool known = qgroup && read_number(qgroup, "max_referenced", &limit);
    free(qgroup);
    size_t n;
    const struct size_tier *t = tier_table(&n);
    bool ok = false, matched = false, no_space = false;
    for (size_t i = 0; known && !ok && i < n; i++) {
        if (quota.bytes[i] != limit)
            continue;
        matched = true;
        char *pool = pool_dir(&t[i]);
        for (unsigned k = 0; !ok && !no_space && k < quota.slots; k++) {
            char *slot = xasprintf("%s/%u", pool, k);
            ok = renameat2(AT_FDCWD, store, AT_FDCWD, slot, RENAME_NOREPLACE) == 0;
            no_space = !ok && errno == ENOSPC;
            free(slot);
        }
        free(pool);
    }
    if (!matched)
        log_event("quota slot %s: no tier has its limit (%llu bytes); left in place", store,
                  (unsigned long long)limit);
    if (no_space)
        errno = ENOSPC;
    return ok;
}

/* Commits the filesystem of PATH: btrfs gives back what was deleted only at its next commit,
 * which a full filesystem needs before a rename. */
static void commit_filesystem(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

/* Before workspace directory DIR is removed: empties its slot (if it has one) and returns it
 * to its pool. True when DIR holds no slot afterwards. */
bool quota_slot_return(const char *dir)
{
    char *store = xasprintf("%s/store", dir);
    struct stat st;
    bool ok = lstat(store, &st) != 0 && errno == ENOENT;
    if (!ok && !quota.layout)
        ok = true;   /* not a slot: remove_tree decides */
    else if (!ok) {
        ok = slot_empty(store) && slot_to_pool(store);
        if (!ok && errno == ENOSPC) {   /* full: the emptied files' room comes at a commit */
            commit_filesystem(store);
            ok = slot_to_pool(store);
        }
        if (!ok)
            log_event("quota slot %s: cannot return it to its pool: %s", store, strerror(errno));
    }
    free(store);
    return ok;
}

/* Whether workspace ID has reached its disk limit: its slot's usage (charged and reserved)
 * within a block of its limit. False without quotas or when unknown. */
bool quota_full(const char *id)
{
    if (!quota.sysfs[0])
        return false;
    char *store = layout_store_dir(id);
    char *qgroup = slot_qgroup(store);
    free(store);
    uint64_t used = 0, limit = 0, rsv = 0, part = 0;
    bool known = qgroup && read_number(qgroup, "max_referenced", &limit) &&
                 read_number(qgroup, "referenced", &used);
    static const char *reserved[] = {"rsv_data", "rsv_meta_pertrans", "rsv_meta_prealloc"};
    for (int i = 0; known && i < 3; i++)
        if (read_number(qgroup, reserved[i], &part))
            rsv += part;
    free(qgroup);
    return known && limit > 0 && used + rsv + QUOTA_FULL_SLACK >= limit;
}

/* ---- inotify ---- */

/* What the helper writes, prepared before it starts. */
struct inotify_job {
    int user_ns_fd;
    char instances[24], watches[24];
    int error;
};

/* The helper (spawn_borrowing): as the sandbox user, joins the workspace's user namespace
 * and writes its inotify bounds (the sysctl set is the caller's namespace's). */
CHILD_ENTRY static int inotify_helper(void *arg)
{
    struct inotify_job *job = arg;
    if (!become_sandbox_user() || setns(job->user_ns_fd, CLONE_NEWUSER) != 0 ||
        !write_proc_file("/proc/sys/user/max_inotify_instances", job->instances) ||
        !write_proc_file("/proc/sys/user/max_inotify_watches", job->watches)) {
        job->error = errno;
        _exit(1);
    }
    _exit(0);
}

/* Bounds the inotify instances and watches of the holder of WS (just started, nothing runs
 * inside yet) to its tier's. False when the kernel refused. */
bool quota_inotify_bound(struct workspace *ws)
{
    struct inotify_job job = {.user_ns_fd = ws->user_ns_fd};
    snprintf(job.instances, sizeof job.instances, "%u", ws->tier->inotify_instances);
    snprintf(job.watches, sizeof job.watches, "%u", ws->tier->inotify_watches);
    int status = 0;
    pid_t pid = ws->user_ns_fd >= 0 ? spawn_borrowing(inotify_helper, &job) : -1;
    if (pid > 0)
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
            ;
    bool ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
        log_event("workspace %s: cannot bound its inotify use: %s", ws->id,
                  job.error ? strerror(job.error) : "no user namespace");
    return ok;
}
