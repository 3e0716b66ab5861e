/*
 * hostsetup.c - `mesh-sandboxd --setup-host USER`: the install-time step, run as root, that lets
 * a daemon running as USER (the embedded one runs as the database's OS user) enforce limits.
 *
 * It prepares two things, both idempotent and re-used by every later start of the daemon:
 *  - cgroups: the subtree --cgroup-name (default mesh-<user>-<hash of the state dir>, so that
 *    two clusters on one host never share one) in the memory, pids, cpu and cpuacct v1
 *    hierarchies, delegated to USER (cgroup.c, cgroup_delegate);
 *  - disk: with --disk-bytes N, a preallocated btrfs image <state-dir>/workspaces.img mounted
 *    (loop, nodev, nosuid) on <state-dir>/workspaces, so workspace files live on a filesystem
 *    of their own: a workspace that fills it fails its own writes, never the host's (the
 *    database's) filesystem. Preallocation matters: a sparse image would take host space
 *    while it fills. On it, quota groups and per tier a pool of --quota-slots subvolumes
 *    with the tier's byte limit (quota.c), so that one workspace cannot fill it for the
 *    others: setting a limit takes root, the daemon does not have it. An image made by an
 *    older --setup-host (ext4, no quota) is kept as it is and the run says how to remake it;
 *    the daemon then reports disk_quota false;
 *  - inotify: each workspace's instances and watches are bounded in its own user namespace
 *    (quota.c), within the host's per-user bound, which all of them share (they run as one
 *    uid): the host's is raised to at least INOTIFY_HOST_INSTANCES and _WATCHES, so that
 *    many workspaces at their own bounds still leave room for the next;
 *  - cgroup joins: the kernel's expedited RCU grace periods (/sys/kernel/rcu_expedited), unless
 *    --no-expedited-rcu. Every exec moves its processes into the exec's groups and every holder
 *    into its workspace's; with cgroup v1 each such move takes a lock whose writer waits out an
 *    RCU grace period when no move happened a moment before: 5-20 ms on the VMs measured, for
 *    the first exec after any idle moment (a harness thinks between commands), against 0.1 ms
 *    with expedited grace periods. The price is the kernel's, host-wide: a synchronize_rcu()
 *    anywhere interrupts every CPU briefly instead of waiting (docs/sandboxd.md).
 * What was prepared is recorded in <state-dir>/host.json (root-owned), which a daemon started
 * on that state dir reads for its cgroup name. Nothing here survives a reboot (cgroups and
 * mounts are runtime state): run it at boot before the database, e.g. from a systemd unit.
 */
#include "hostsetup.h"
#include "cgroup.h"
#include "config.h"
#include "log.h"
#include "quota.h"
#include "sandbox.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The default subtree name for USER's daemon on STATE_DIR: stable across runs, distinct per
 * state dir (FNV-1a of its path). */
static char *default_cgroup_name(const char *user, const char *state_dir)
{
    uint32_t h = 2166136261u;
    for (const char *p = state_dir; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return xasprintf("mesh-%s-%08x", user, h);
}

/* True when PATH is a mount point of its own (another device than its parent directory). */
static bool is_own_filesystem(const char *path, const char *parent)
{
    struct stat a, b;
    return stat(path, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* True when directory PATH has no entries besides . and .. (or does not exist). */
static bool dir_empty(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    bool empty = true;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = false;
    if (d)
        closedir(d);
    return empty;
}

/* Creates the preallocated image IMAGE of BYTES with a btrfs filesystem (its root is handed to
 * UID:GID once mounted). */
static bool make_image(const char *image, size_t bytes, uid_t uid, gid_t gid)
{
    int fd = open(image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int error = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    if (fd >= 0)
        close(fd);
    if (error != 0) {
        fprintf(stderr, "mesh-sandboxd: cannot allocate %zu bytes for %s: %s\n", bytes, image,
                strerror(error));
        unlink(image);
        return false;
    }
    (void)uid;
    (void)gid;
    /* -K: no discard, which through the loop device would punch holes in the image and undo
     * the preallocation; single data and metadata profiles: one device, no copies; under
     * 1 GiB, data and metadata share their block groups (--mixed, as btrfs advises for small
     * filesystems: separate ones strand tens of MiB of metadata room a full data side cannot
     * use, and workspaces at their quotas fill the data side) */
    char *argv[] = {"/usr/sbin/mkfs.btrfs", "-q", "-f", "-K", "-d", "single", "-m", "single",
                    (char *)image, NULL, NULL};
    if (bytes < (1ul << 30)) {
        argv[8] = "--mixed";
        argv[9] = (char *)image;
    }
    if (!run_host_command(argv)) {
        fprintf(stderr, "mesh-sandboxd: mkfs.btrfs failed on %s (package btrfs-progs)\n",
                image);
        unlink(image);
        return false;
    }
    return true;
}

/* Puts <state>/workspaces on a filesystem of its own of BYTES (creating the image the first
 * time, mounting it when it is not mounted); true when it is there afterwards. */
static bool setup_disk(size_t bytes, uid_t uid, gid_t gid, char **image_out)
{
    char *mountpoint = xasprintf("%s/workspaces", g_config.state_dir);
    char *image = xasprintf("%s/workspaces.img", g_config.state_dir);
    struct stat st;
    bool ok = true;
    *image_out = image;
    mkdir(mountpoint, 0711);
    if (is_own_filesystem(mountpoint, g_config.state_dir)) {
        printf("workspaces: %s is already a filesystem of its own\n", mountpoint);
    } else if (!dir_empty(mountpoint)) {
        fprintf(stderr, "mesh-sandboxd: %s holds workspaces already; release them (or move "
                "them away) before putting it on its own filesystem\n", mountpoint);
        ok = false;
    } else if (stat(image, &st) != 0 && !make_image(image, bytes, uid, gid)) {
        ok = false;
    } else {
        /* nodiscard: see make_image */
        char *argv[] = {"/usr/bin/mount", "-o", "loop,nodev,nosuid,noatime,nodiscard", image,
                        mountpoint, NULL};
        ok = run_host_command(argv) && is_own_filesystem(mountpoint, g_config.state_dir);
        if (!ok)
            fprintf(stderr, "mesh-sandboxd: cannot mount %s on %s\n", image, mountpoint);
        else
            printf("workspaces: %s mounted on %s\n", image, mountpoint);
        /* root's 0700 lost+found would stop PostgreSQL's walk of its data directory after a
         * crash ("could not open directory"); e2fsck makes it again when it needs one */
        char *lost = xasprintf("%s/lost+found", mountpoint);
        rmdir(lost);
        free(lost);
    }
    if (ok && (chown(mountpoint, uid, gid) != 0 || chmod(mountpoint, 0711) != 0)) {
        fprintf(stderr, "mesh-sandboxd: cannot hand %s to uid %d: %s\n", mountpoint, (int)uid,
                strerror(errno));
        ok = false;
    }
    free(mountpoint);
    return ok;
}

/* The host's per-user inotify bounds, at least (see the header). Watches cost about 1 KiB of
 * kernel memory each, charged to the memory group of the workspace that adds them. */
#define INOTIFY_HOST_INSTANCES 8192
#define INOTIFY_HOST_WATCHES 1048576

/* Raises the sysctl PATH to FLOOR when it is lower; true when it is at least FLOOR. */
static bool sysctl_raise(const char *path, long floor)
{
    char buf[32];
    FILE *f = fopen(path, "r");
    long now = f && fgets(buf, sizeof buf, f) ? strtol(buf, NULL, 10) : -1;
    if (f)
        fclose(f);
    if (now >= floor)
        return true;
    f = fopen(path, "w");
    bool ok = f && fprintf(f, "%ld\n", floor) > 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    return ok;
}

/* Raises the host's per-user inotify bounds (see the header); says what it did. */
static bool setup_inotify(void)
{
    bool ok = sysctl_raise("/proc/sys/fs/inotify/max_user_instances", INOTIFY_HOST_INSTANCES) &&
              sysctl_raise("/proc/sys/fs/inotify/max_user_watches", INOTIFY_HOST_WATCHES);
    if (ok)
        printf("inotify: the host's per-user bounds are at least %d instances and %d watches; "
               "each workspace has its tier's own\n", INOTIFY_HOST_INSTANCES, INOTIFY_HOST_WATCHES);
    else
        fprintf(stderr, "mesh-sandboxd: cannot raise fs.inotify.max_user_instances/watches: "
                "%s\n", strerror(errno));
    return ok;
}

#define RCU_EXPEDITED_PATH "/sys/kernel/rcu_expedited"

/* Whether the kernel's RCU grace periods are expedited now (see the header); false when the
 * file is missing or unreadable. */
static bool host_rcu_expedited(void)
{
    char c = '0';
    int fd = open(RCU_EXPEDITED_PATH, O_RDONLY | O_CLOEXEC);
    bool on = fd >= 0 && read(fd, &c, 1) == 1 && c != '0';
    if (fd >= 0)
        close(fd);
    return on;
}

/* Turns expedited RCU grace periods on (see the header); says what it did. A kernel without
 * the switch, or one that refuses it, leaves the set-up complete: only slower. */
static bool setup_expedited_rcu(void)
{
    int fd = open(RCU_EXPEDITED_PATH, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, "1", 1) == 1;
    int error = errno;
    if (fd >= 0)
        close(fd);
    if (ok)
        printf("cgroup joins: expedited RCU grace periods on (%s = 1): a process joins its "
               "groups in about 0.1 ms, not after a grace period (--no-expedited-rcu keeps the "
               "kernel as it is)\n", RCU_EXPEDITED_PATH);
    else
        printf("cgroup joins: cannot expedite RCU grace periods (%s: %s): the first exec after "
               "an idle moment may wait 5-20 ms for its cgroup join\n", RCU_EXPEDITED_PATH,
               strerror(error));
    return ok;
}

/* Records what was prepared, for the daemon's later starts (read by host_config_load and
 * quota_init); QUOTA holds the disk quotas' record, or nothing. */
static bool write_host_file(const char *user, const char *image, size_t disk_bytes,
                            json_t *quota)
{
    json_t *doc = json_pack("{s:s,s:s,s:b}", "user", user, "cgroup_name", g_config.cgroup_name,
                            "rcu_expedited", host_rcu_expedited());
    json_object_update(doc, quota);
    if (image)
        json_object_set_new(doc, "disk_image", json_string(image));
    if (disk_bytes)
        json_object_set_new(doc, "disk_bytes", json_integer((json_int_t)disk_bytes));
    char *text = json_dumps(doc, JSON_COMPACT);
    char *path = xasprintf("%s/host.json", g_config.state_dir);
    bool ok = write_file_atomic(path, text, strlen(text), 0644, true);
    free(path);
    free(text);
    json_decref(doc);
    return ok;
}

/* --setup-host USER: returns the process exit status. */
int host_setup(const char *user, size_t disk_bytes, unsigned quota_slots, bool cgroup_name_given,
               bool expedite_rcu)
{
    struct passwd entry, *pw = &entry;
    char buf[1024];
    bool known = user_lookup(user, 0, &entry, buf, sizeof buf);
    char *image = NULL;
    if (!g_config.is_root) {
        fprintf(stderr, "mesh-sandboxd: --setup-host must run as root\n");
        return 1;
    }
    if (!known || pw->pw_uid == 0) {
        fprintf(stderr, "mesh-sandboxd: --setup-host needs an existing unprivileged user\n");
        return 1;
    }
    if (!cgroup_name_given)
        g_config.cgroup_name = default_cgroup_name(user, g_config.state_dir);
    if (chown(g_config.state_dir, pw->pw_uid, pw->pw_gid) != 0 ||
        chmod(g_config.state_dir, 0711) != 0) {
        fprintf(stderr, "mesh-sandboxd: cannot hand %s to %s: %s\n", g_config.state_dir, user,
                strerror(errno));
        return 1;
    }
    bool ok = cgroup_delegate(g_config.cgroup_name, pw->pw_uid, pw->pw_gid);
    json_t *quota = json_object();
    if (disk_bytes && setup_disk(disk_bytes, pw->pw_uid, pw->pw_gid, &image)) {
        char *mountpoint = xasprintf("%s/workspaces", g_config.state_dir);
        ok = quota_setup_host(mountpoint, disk_bytes, quota_slots, pw->pw_uid, pw->pw_gid,
                              quota) && ok;
        free(mountpoint);
    } else if (disk_bytes) {
        ok = false;
    }
    ok = setup_inotify() && ok;
    if (expedite_rcu)
        (void)setup_expedited_rcu();
    ok = write_host_file(user, image, disk_bytes, quota) && ok;
    json_decref(quota);
    free(image);
    printf("%s: host %s for mesh-sandboxd as %s on %s\n", ok ? "ok" : "incomplete",
           ok ? "prepared" : "partly prepared", user, g_config.state_dir);
    return ok ? 0 : 1;
}

/* At start without --cgroup-name: the subtree --setup-host delegated for this state dir. */
void host_config_load(void)
{
    char *path = xasprintf("%s/host.json", g_config.state_dir);
    json_t *doc = json_load_file(path, 0, NULL);
    const char *name = json_string_value(json_object_get(doc, "cgroup_name"));
    if (name && *name && !strstr(name, "..")) {
        g_config.cgroup_name = strdup(name);
        log_event("host set-up found: cgroup subtree %s", name);
        if (!host_rcu_expedited())
            log_event("RCU grace periods are not expedited (%s is 0): the first exec after an "
                      "idle moment may wait 5-20 ms for its cgroup join (mesh-sandboxd "
                      "--setup-host turns them on)", RCU_EXPEDITED_PATH);
    }
    json_decref(doc);
    free(path);
}

/* Whether workspace files are on a filesystem of their own (what --setup-host --disk-bytes
 * makes), and so cannot fill the filesystem of the state dir or of --protect-path. */
bool host_disk_isolated(void)
{
    char *dir = xasprintf("%s/workspaces", g_config.state_dir);
    struct stat ws, other;
    bool isolated = stat(dir, &ws) == 0 && stat(g_config.state_dir, &other) == 0 &&
                    ws.st_dev != other.st_dev &&
                    (!g_config.protect_path ||
                     (stat(g_config.protect_path, &other) == 0 && ws.st_dev != other.st_dev));
    free(dir);
    return isolated;
}

/* Whether the daemon must refuse new workspaces: told to protect a filesystem (the embedded
 * daemon protects PGDATA's) that workspace files would share. */
bool host_disk_refused(void)
{
    char *dir = xasprintf("%s/workspaces", g_config.state_dir);
    struct stat ws, other;
    bool shared = g_config.protect_path && stat(dir, &ws) == 0 &&
                  stat(g_config.protect_path, &other) == 0 && ws.st_dev == other.st_dev;
    free(dir);
    return shared;
}
