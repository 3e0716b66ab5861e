/*
 * snapshot.c - project-state snapshots: immutable trees captured from a workspace, and
 * workspaces that start as a copy-on-write view of one.
 *
 * A snapshot is a directory <state>/workspaces/.snapshots/<id>/ holding meta.json and tree/,
 * on the workspaces' own (bounded) filesystem. Nothing inside a sandbox can reach it by path;
 * it is only ever the lower layer of overlay mounts, so it never changes once it is ready.
 *
 * A workspace created from a snapshot gets an overlay mounted on its /workspace inside its own
 * namespaces: lower = the snapshot's tree, upper = the workspace's files/ (its own writes),
 * work = <ws>/work. The mount is made by a helper that joins the workspace's user namespace
 * (where the daemon's user, the namespace's owner, has every capability) and mount namespace:
 * unprivileged overlayfs, so it works for the embedded daemon that is not root. Starting a
 * workspace from a snapshot therefore costs one mount whatever the tree's size, and two
 * workspaces from one snapshot never see each other's writes (each has its own upper).
 * Hibernate/wake and restarts mount it again whenever a new holder starts.
 *
 * Capture copies the workspace's /workspace as its commands see it (through the holder's
 * root, so a workspace standing on a snapshot is flattened) into .capture-<id>/, then renames
 * it into place: a daemon killed meanwhile leaves only a .capture- directory, removed at the
 * next start, never a half-made snapshot. Capture never pauses the workspace's commands (the
 * bound is zero); a file written while it is copied is captured as the copy found it. The
 * copy opens every entry relative to its parent without following symlinks (they are copied
 * as links), so nothing outside the workspace can be read into a snapshot. It leaves out the
 * run token's /workspace/.mesh, the file call's temporary files and what /workspace/.meshignore
 * names (snapshot_exclude.c), and copies a file's data only: holes stay holes.
 */
#include "snapshot.h"
#include "config.h"
#include "hostsetup.h"
#include "json.h"
#include "layout.h"
#include "log.h"
#include "registry.h"
#include "sandbox.h"
#include "snapshot_exclude.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CAPTURE_PREFIX ".capture-"
#define TRASH_PREFIX ".trash-"
#define CAPTURE_MAX_DEPTH 256     /* directory levels a captured tree may have */
#define COPY_BUFFER_BYTES (256 * 1024)
/* the longest path from /workspace a capture walks: CAPTURE_MAX_DEPTH names and their '/' */
#define CAPTURE_PATH_BYTES ((CAPTURE_MAX_DEPTH + 2) * (NAME_MAX + 1))

/* Ids being captured now; under snap_lock (taken before registry_lock, never after). */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
struct capturing {
    char id[WORKSPACE_ID_MAX + 1];
    struct capturing *next;
};
static struct capturing *capturing_list;
static unsigned trash_counter;    /* under snap_lock */

/* <state>/workspaces/.snapshots */
static char *snapshots_root(void)
{
    return xasprintf("%s/workspaces/.snapshots", g_config.state_dir);
}

/* <state>/workspaces/.snapshots/<id> */
static char *snapshot_dir(const char *id)
{
    return xasprintf("%s/workspaces/.snapshots/%s", g_config.state_dir, id);
}

/* <state>/workspaces/.snapshots/<id>/tree: the lower layer */
static char *snapshot_tree(const char *id)
{
    return xasprintf("%s/workspaces/.snapshots/%s/tree", g_config.state_dir, id);
}

/* The raw mount-API system calls (glibc 2.36 has wrappers, older ones do not). */
CHILD_ENTRY static int sys_fsopen(const char *name, unsigned flags)
{
    return (int)syscall(SYS_fsopen, name, flags);
}
CHILD_ENTRY static int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value,
                                     int aux)
{
    return (int)syscall(SYS_fsconfig, fd, cmd, key, value, aux);
}
CHILD_ENTRY static int sys_fsmount(int fd, unsigned flags, unsigned attrs)
{
    return (int)syscall(SYS_fsmount, fd, flags, attrs);
}
CHILD_ENTRY static int sys_move_mount(int from, const char *from_path, int to,
                                      const char *to_path, unsigned flags)
{
    return (int)syscall(SYS_move_mount, from, from_path, to, to_path, flags);
}

/* Makes an overlay mount of the directories LOWER, UPPER and WORK (descriptors) and returns
 * its detached mount descriptor, or -1. The caller is in a user namespace and a mount
 * namespace it owns, the descriptors opened there: overlayfs takes private clones of the
 * layers' mounts, which the kernel allows only from the caller's own mount namespace. Layers
 * given by descriptor need Linux 6.13. */
CHILD_ENTRY static int overlay_make(int lower, int upper, int work)
{
    int fs = sys_fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0)
        return -1;
    int mnt = -1;
    if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "source", "mesh-snapshot", 0) == 0 &&
        sys_fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, lower) == 0 &&
        sys_fsconfig(fs, FSCONFIG_SET_FD, "upperdir", NULL, upper) == 0 &&
        sys_fsconfig(fs, FSCONFIG_SET_FD, "workdir", NULL, work) == 0 &&
        sys_fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) == 0 &&
        sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mnt = sys_fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    close(fs);
    return mnt;
}

/* Opens the three layer directories of an overlay (not O_PATH: fsconfig takes only real
 * open files); false when one is missing. */
CHILD_ENTRY static bool layers_open(const char *lower, const char *upper, const char *work,
                                    int fds[3])
{
    const char *paths[3] = {lower, upper, work};
    for (int i = 0; i < 3; i++)
        fds[i] = open(paths[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0;
}

/* The mount helper's steps; its exit status is the step that failed (0: mounted). */
static const char *const mount_steps[] = {
    "mounted", "become the sandbox user", "join the user namespace", "open the layers",
    "make the overlay", "join the mount namespace", "mount it on /workspace"};

/* What the mount helper needs, prepared before it starts. It writes back only error (seen
 * by the daemon when the helper shares its memory, not in sanitizer builds). */
struct mount_job {
    struct workspace *ws;
    char *lower, *upper, *work;
    int mnt_ns_fd;   /* the holder's mount namespace (the daemon keeps no descriptor of it) */
    int error;
};

/* In the helper (spawn_borrowing): as the sandbox user, joins the workspace's outer user
 * namespace (full capabilities there) and makes a mount namespace of its own there (a copy of
 * the host's, where the layers' paths resolve), makes the overlay in it, then joins the
 * workspace's mount namespace and moves the overlay onto /workspace of the holder's root. */
CHILD_ENTRY static int mount_helper(void *arg)
{
    struct mount_job *job = arg;
    struct workspace *ws = job->ws;
    int layers[3] = {-1, -1, -1}, mnt = -1, step = 1;
    if (!become_sandbox_user())
        goto fail;
    step++;
    if (setns(ws->user_ns_fd, CLONE_NEWUSER) != 0 || unshare(CLONE_NEWNS) != 0)
        goto fail;
    step++;
    if (!layers_open(job->lower, job->upper, job->work, layers))
        goto fail;
    step++;
    if ((mnt = overlay_make(layers[0], layers[1], layers[2])) < 0)
        goto fail;
    step++;
    if (setns(job->mnt_ns_fd, CLONE_NEWNS) != 0 || fchdir(ws->root_fd) != 0 || chroot(".") != 0)
        goto fail;
    step++;
    if (sys_move_mount(mnt, "", AT_FDCWD, "/workspace", MOVE_MOUNT_F_EMPTY_PATH) != 0)
        goto fail;
    _exit(0);
fail:
    job->error = errno;
    _exit(step);
}

/*
 * Puts the workspace's snapshot under its /workspace; called by the lifecycle holder right
 * after a holder started (created, woken or restarted), before anything runs inside. Nothing
 * to do for a workspace without a snapshot. False with spawn_failed (the caller stops the
 * holder, so nothing runs over an empty /workspace).
 */
bool snapshot_mount(struct workspace *ws, struct api_error *err)
{
    if (!ws->snapshot[0])
        return true;
    struct mount_job job = {.ws = ws, .lower = snapshot_tree(ws->snapshot),
                            .upper = workspace_files_dir(ws->id),
                            .work = workspace_work_dir(ws->id), .mnt_ns_fd = -1};
    char ns_path[64];
    int status = 0;
    /* the holder has just started and runs (its bubblewrap is our child): the pid is its own */
    snprintf(ns_path, sizeof ns_path, "/proc/%d/ns/mnt", (int)ws->holder_pid);
    job.mnt_ns_fd = open(ns_path, O_RDONLY | O_CLOEXEC);
    pid_t pid = job.mnt_ns_fd >= 0 ? spawn_borrowing(mount_helper, &job) : -1;
    if (pid < 0)
        job.error = errno;
    else
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
            ;
    int step = pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    bool ok = step == 0;
    if (!ok) {
        log_event("workspace %s: cannot mount snapshot %s (%s: %s)", ws->id, ws->snapshot,
                  step > 0 && step < (int)(sizeof mount_steps / sizeof mount_steps[0])
                      ? mount_steps[step] : "helper", job.error ? strerror(job.error) : "?");
        api_error_set(err, 500, "spawn_failed", "the workspace's snapshot could not be mounted");
    }
    if (job.mnt_ns_fd >= 0)
        close(job.mnt_ns_fd);
    free(job.lower);
    free(job.upper);
    free(job.work);
    return ok;
}

/* Creates the overlay work directory of a new workspace on a snapshot (owned by the sandbox
 * user, like files/). */
bool snapshot_make_work_dir(struct workspace *ws)
{
    if (!ws->snapshot[0])
        return true;
    char *work = workspace_work_dir(ws->id);
    bool ok = (mkdir(work, 0700) == 0 || errno == EEXIST) &&
              (!g_config.is_root || chown(work, g_config.sandbox_uid, g_config.sandbox_gid) == 0);
    free(work);
    return ok;
}

/* ---- capability detection ---- */

/* The probe's paths and maps, prepared before it starts (it makes system calls only). */
struct probe_job {
    char *lower, *upper, *work;
    char uid_map[64], gid_map[64];
};

/* The probe child (spawn_borrowing, not fork: a sanitizer's fork child runs a thread of the
 * runtime's, and a multithreaded process cannot unshare its user namespace): as the sandbox
 * user, a new user and mount namespace, then an overlay of the job's directories. Exits 0
 * when the kernel allowed it, else the step that failed. */
CHILD_ENTRY static int probe_child(void *arg)
{
    struct probe_job *job = arg;
    int layers[3];
    /* the daemon is not dumpable (main.c), and changing user resets it, which would leave
     * /proc/self/uid_map root's */
    if (!become_sandbox_user() || prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
        _exit(1);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
        _exit(2);
    if (!write_proc_file("/proc/self/uid_map", job->uid_map) ||
        !write_proc_file("/proc/self/setgroups", "deny") ||
        !write_proc_file("/proc/self/gid_map", job->gid_map))
        _exit(3);
    if (!layers_open(job->lower, job->upper, job->work, layers))
        _exit(4);
    _exit(overlay_make(layers[0], layers[1], layers[2]) >= 0 ? 0 : 5);
}

/* Whether workspaces can stand on snapshots here: an unprivileged overlay mount in a user
 * namespace of the sandbox user, on the workspaces' filesystem, tried once at start. */
bool snapshot_detect(void)
{
    char *root = xasprintf("%s/workspaces", g_config.state_dir);
    char *dir = xasprintf("%s/.snapshot-probe", root);
    struct probe_job job = {.lower = xasprintf("%s/lower", dir),
                            .upper = xasprintf("%s/upper", dir),
                            .work = xasprintf("%s/work", dir)};
    const char *parts[] = {job.lower, job.upper, job.work};
    snprintf(job.uid_map, sizeof job.uid_map, "%d %d 1", (int)g_config.sandbox_uid,
             (int)g_config.sandbox_uid);
    snprintf(job.gid_map, sizeof job.gid_map, "%d %d 1", (int)g_config.sandbox_gid,
             (int)g_config.sandbox_gid);
    bool ok = mkdir_p(root, 0711);
    remove_tree(dir);   /* left by a daemon killed while probing */
    ok = ok && mkdir(dir, 0700) == 0 &&
         (!g_config.is_root || chown(dir, g_config.sandbox_uid, g_config.sandbox_gid) == 0);
    for (int i = 0; ok && i < 3; i++)
        ok = mkdir(parts[i], 0700) == 0 &&
             (!g_config.is_root ||
              chown(parts[i], g_config.sandbox_uid, g_config.sandbox_gid) == 0);
    int status = 0;
    pid_t pid = ok ? spawn_borrowing(probe_child, &job) : -1;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    remove_tree(dir);
    if (!ok)   /* the probe's exit status is its step: 2 user namespace, 5 overlay */
        log_event("snapshots unavailable: no overlay mount in a user namespace here (probe "
                  "status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(job.lower);
    free(job.upper);
    free(job.work);
    free(dir);
    free(root);
    return ok;
}

/* ---- the registry on disk ---- */

/* True while ID is being captured (caller holds snap_lock). */
static bool capturing_has(const char *id)
{
    for (struct capturing *c = capturing_list; c; c = c->next)
        if (strcmp(c->id, id) == 0)
            return true;
    return false;
}

/* Removes ID from the capturing list (caller holds snap_lock). */
static void capturing_remove(const char *id)
{
    for (struct capturing **p = &capturing_list; *p; p = &(*p)->next)
        if (strcmp((*p)->id, id) == 0) {
            struct capturing *gone = *p;
            *p = gone->next;
            free(gone);
            return;
        }
}

/* The meta.json of a ready snapshot, or NULL when there is none (not captured, deleted, or
 * damaged). */
static json_t *snapshot_meta(const char *id)
{
    char *dir = snapshot_dir(id);
    char *path = xasprintf("%s/meta.json", dir);
    json_t *meta = json_load_file(path, 0, NULL);
    if (meta && (!json_is_object(meta) || !json_is_object(json_object_get(meta, "labels")))) {
        json_decref(meta);
        meta = NULL;
    }
    free(path);
    free(dir);
    return meta;
}

/* The API object of a ready snapshot from its META (consumed), with the number of
 * registered workspaces standing on it. */
static json_t *snapshot_describe(const char *id, json_t *meta)
{
    json_object_set_new(meta, "id", json_string(id));
    json_object_set_new(meta, "state", json_string("ready"));
    json_object_set_new(meta, "workspaces", json_integer(workspaces_on_snapshot(id)));
    return meta;
}

/* Whether a workspace may be created on snapshot ID: ready, or the reason in ERR. The caller
 * holds snap_lock (snapshot_lock) until the workspace is registered, so a delete cannot slip
 * in between. */
bool snapshot_usable(const char *id, struct api_error *err)
{
    if (!g_caps.snapshot) {
        api_error_set(err, 400, "snapshot_unsupported",
                      "this host cannot start workspaces from snapshots (snapshot is false)");
        return false;
    }
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_snapshot_id", "snapshot id is not valid");
        return false;
    }
    if (capturing_has(id)) {
        api_error_set(err, 409, "snapshot_capturing", "snapshot \"%s\" is still being captured",
                      id);
        return false;
    }
    json_t *meta = snapshot_meta(id);
    if (!meta) {
        api_error_set(err, 404, "snapshot_not_found", "no snapshot with id \"%s\"", id);
        return false;
    }
    json_decref(meta);
    return true;
}

/* snap_lock for callers outside this file (workspace.c's acquire). */
void snapshot_lock(void)
{
    pthread_mutex_lock(&snap_lock);
}
void snapshot_unlock(void)
{
    pthread_mutex_unlock(&snap_lock);
}

/* GET /v1/snapshots/{id} */
json_t *snapshot_get(const char *id, struct api_error *err)
{
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_snapshot_id", "snapshot id is not valid");
        return NULL;
    }
    pthread_mutex_lock(&snap_lock);
    bool capturing = capturing_has(id);
    json_t *meta = capturing ? NULL : snapshot_meta(id);
    pthread_mutex_unlock(&snap_lock);
    if (capturing)
        return json_pack("{s:s,s:s}", "id", id, "state", "capturing");
    if (!meta)
        api_error_set(err, 404, "snapshot_not_found", "no snapshot with id \"%s\"", id);
    return meta ? snapshot_describe(id, meta) : NULL;
}

/* GET /v1/snapshots[?label=k=v]: ready snapshots and those being captured (for the caller's
 * reconciliation: a capture in flight is not a vanished snapshot). */
json_t *snapshot_list(const char *label_filter, struct api_error *err)
{
    char key[256];
    const char *value;
    if (!label_filter_parse(label_filter, key, sizeof key, &value, err))
        return NULL;
    json_t *list = json_array();
    char *root = snapshots_root();
    pthread_mutex_lock(&snap_lock);
    DIR *d = opendir(root);   /* this request's own stream */
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !workspace_id_valid(e->d_name))
            continue;
        json_t *meta = snapshot_meta(e->d_name);
        if (meta && labels_match(json_object_get(meta, "labels"), key, value))
            json_array_append_new(list, snapshot_describe(e->d_name, meta));
        else
            json_decref(meta);
    }
    if (d)
        closedir(d);
    for (struct capturing *c = capturing_list; c; c = c->next)
        json_array_append_new(list, json_pack("{s:s,s:s}", "id", c->id, "state", "capturing"));
    pthread_mutex_unlock(&snap_lock);
    free(root);
    return json_pack("{s:o}", "snapshots", list);
}

/* DELETE /v1/snapshots/{id}: refused while a workspace (running or hibernated) stands on it;
 * the tree is moved aside under the lock and removed outside it. */
json_t *snapshot_delete(const char *id, struct api_error *err)
{
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_snapshot_id", "snapshot id is not valid");
        return NULL;
    }
    char *dir = snapshot_dir(id), *root = snapshots_root(), *trash = NULL;
    json_t *meta = NULL;
    int standing = 0;
    pthread_mutex_lock(&snap_lock);
    if (capturing_has(id))
        api_error_set(err, 409, "snapshot_capturing", "snapshot \"%s\" is being captured", id);
    else if (!(meta = snapshot_meta(id)))
        api_error_set(err, 404, "snapshot_not_found", "no snapshot with id \"%s\"", id);
    else if ((standing = workspaces_on_snapshot(id)) > 0)
        api_error_set(err, 409, "snapshot_in_use",
                      "%d workspace(s) stand on snapshot \"%s\"; release them first", standing, id);
    else {
        trash = xasprintf("%s/%s%s-%u", root, TRASH_PREFIX, id, trash_counter++);
        if (rename(dir, trash) != 0) {
            api_error_from_errno(err, errno, "cannot remove the snapshot");
            free(trash);
            trash = NULL;
        }
    }
    pthread_mutex_unlock(&snap_lock);
    json_decref(meta);
    free(dir);
    free(root);
    if (!trash)
        return NULL;
    if (!remove_tree(trash))   /* what is left is removed at the next start */
        log_event("snapshot %s: could not remove all of %s: %s", id, trash, strerror(errno));
    free(trash);
    log_event("snapshot %s: deleted", id);
    return json_pack("{s:s,s:b}", "id", id, "deleted", 1);
}

/* ---- capture ---- */

/* One capture's running totals and its first failure. */
struct copy_state {
    uint64_t bytes;          /* regular files' data (holes are not copied) */
    uint64_t files;          /* every entry but directories */
    unsigned char *buffer;   /* COPY_BUFFER_BYTES, when copy_file_range cannot be used */
    bool no_copy_file_range; /* it failed here once (another filesystem): pread/pwrite */
    struct api_error *err;
    char where[256];         /* the entry being copied, for the error message */
    struct capture_exclusions exclusions;   /* what is left out (snapshot_exclude.c) */
    char *path;              /* CAPTURE_PATH_BYTES: the entry's path from /workspace */
    size_t path_len;
};

/* Records the failure of copying the current entry: a full filesystem is disk_full (nothing
 * half made is kept: the caller removes the capture), an unreadable file permission_denied. */
static bool copy_fail(struct copy_state *cs, int error, const char *what)
{
    if (error == ENOSPC || error == EDQUOT)
        api_error_set(cs->err, 507, "disk_full",
                      "the snapshots' filesystem is full; delete snapshots or release workspaces");
    else if (error == EACCES || error == EPERM)
        api_error_set(cs->err, 403, "permission_denied",
                      "cannot %s \"%s\": its mode does not let the sandbox user read it",
                      what, cs->where);
    else
        api_error_set(cs->err, 500, "internal", "cannot %s \"%s\": %s", what, cs->where,
                      strerror(error));
    return false;
}

/* Gives a created entry the sandbox user as owner when the daemon is root (overlayfs reads
 * the lower layer with the mounting user's rights). */
static bool copy_owner(int dir, const char *name)
{
    return !g_config.is_root || fchownat(dir, name, g_config.sandbox_uid, g_config.sandbox_gid,
                                         AT_SYMLINK_NOFOLLOW) == 0;
}

/* Copies LEN bytes at OFFSET of SRC to the same offset of DST: copy_file_range (in-kernel; a
 * reflink where the filesystem can), or pread/pwrite where it cannot cross filesystems. False
 * with the failure recorded; a file that shrank meanwhile ends the range early. */
static bool copy_range(int src, int dst, off_t offset, off_t len, struct copy_state *cs)
{
    off_t in = offset, out = offset, end = offset + len;
    while (in < end) {
        size_t want = (size_t)(end - in < (1 << 30) ? end - in : (1 << 30));
        ssize_t n;
        if (!cs->no_copy_file_range) {
            n = copy_file_range(src, &in, dst, &out, want, 0);
            if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                          errno == EOPNOTSUPP)) {
                cs->no_copy_file_range = true;
                continue;
            }
        } else {
            n = pread(src, cs->buffer, want < COPY_BUFFER_BYTES ? want : COPY_BUFFER_BYTES, in);
            for (ssize_t done = 0; n > 0 && done < n;) {
                ssize_t w = pwrite(dst, cs->buffer + done, (size_t)(n - done), out + done);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    return copy_fail(cs, w < 0 ? errno : ENOSPC, "copy");
                done += w;
            }
            if (n > 0) {
                in += n;
                out += n;
            }
        }
        if (n == 0)
            return true;
        if (n < 0 && errno != EINTR)
            return copy_fail(cs, errno, "copy");
        if (n > 0)
            cs->bytes += (uint64_t)n;
    }
    return true;
}

/* Copies the contents of regular file SRC to DST, data only: the ranges SEEK_DATA/SEEK_HOLE
 * find (the whole file where the filesystem cannot tell), then DST's size set to SRC's, so a
 * hole stays a hole and a 1 GiB sparse file costs its data. */
static bool copy_contents(int src, int dst, struct copy_state *cs)
{
    off_t pos = 0, size = lseek(src, 0, SEEK_END);
    if (size < 0)
        return copy_fail(cs, errno, "read");
    while (pos < size) {
        off_t data = lseek(src, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break;                      /* only a hole is left */
        off_t hole = data < 0 ? size : lseek(src, data, SEEK_HOLE);
        if (data < 0)
            data = pos;                 /* no SEEK_DATA here: all of it is data */
        if (hole < 0 || hole > size)
            hole = size;
        if (!copy_range(src, dst, data, hole - data, cs))
            return false;
        pos = hole;
    }
    return ftruncate(dst, size) == 0 || copy_fail(cs, errno, "copy");
}

/* Copies regular file NAME (already lstat'ed as ST) from directory SRC to DST. Opened with
 * O_NOFOLLOW and checked again: an entry swapped for a symlink or a FIFO meanwhile is never
 * followed or waited on. */
static bool copy_file(int src, int dst, const char *name, const struct stat *st,
                      struct copy_state *cs)
{
    struct stat now;
    int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT || errno == ELOOP || copy_fail(cs, errno, "read");
    if (fstat(in, &now) != 0 || !S_ISREG(now.st_mode)) {
        close(in);
        return true;   /* changed under us into something else: skipped */
    }
    int out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    bool ok = out >= 0 ? copy_contents(in, out, cs) : copy_fail(cs, errno, "create");
    if (ok) {
        struct timespec times[2] = {st->st_atim, now.st_mtim};
        ok = (fchmod(out, now.st_mode & 01777) == 0 && futimens(out, times) == 0 &&
              copy_owner(dst, name)) || copy_fail(cs, errno, "set attributes of");
    }
    if (out >= 0)
        close(out);
    close(in);
    cs->files++;
    return ok;
}

/* Copies symlink NAME as a symlink (never followed). */
static bool copy_symlink(int src, int dst, const char *name, const struct stat *st,
                         struct copy_state *cs)
{
    char target[4096];
    ssize_t n = readlinkat(src, name, target, sizeof target - 1);
    if (n < 0)
        return errno == ENOENT || errno == EINVAL || copy_fail(cs, errno, "read");
    target[n] = '\0';
    struct timespec times[2] = {st->st_atim, st->st_mtim};
    cs->files++;
    return (symlinkat(target, dst, name) == 0 &&
            utimensat(dst, name, times, AT_SYMLINK_NOFOLLOW) == 0 && copy_owner(dst, name)) ||
           copy_fail(cs, errno, "create");
}

static bool copy_tree(int src, int dst, int depth, struct copy_state *cs);

/* Copies subdirectory NAME: made writable by its owner while it is filled, given its own
 * mode and times at the end. */
static bool copy_subdir(int src, int dst, const char *name, const struct stat *st, int depth,
                        struct copy_state *cs)
{
    if (depth >= CAPTURE_MAX_DEPTH) {
        api_error_set(cs->err, 422, "snapshot_too_deep",
                      "the tree is deeper than %d directories (at \"%s\")", CAPTURE_MAX_DEPTH,
                      cs->where);
        return false;
    }
    int in = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ||
               copy_fail(cs, errno, "read");
    int out = -1;
    bool ok = (mkdirat(dst, name, 0700) == 0 &&
               (out = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0) ||
              copy_fail(cs, errno, "create");
    ok = ok && copy_tree(in, out, depth + 1, cs);
    if (ok) {
        struct timespec times[2] = {st->st_atim, st->st_mtim};
        ok = (fchmod(out, st->st_mode & 01777) == 0 && futimens(out, times) == 0 &&
              copy_owner(dst, name)) || copy_fail(cs, errno, "set attributes of");
    }
    if (out >= 0)
        close(out);
    close(in);
    return ok;
}

/* Appends NAME to the path of the entry being copied. CAPTURE_PATH_BYTES hold the deepest one
 * (copy_subdir stops at CAPTURE_MAX_DEPTH, a name has at most NAME_MAX bytes); the bound is
 * checked all the same. */
static void path_push(struct copy_state *cs, const char *name)
{
    size_t len = strlen(name), sep = cs->path_len > 0;
    if (cs->path_len + sep + len >= CAPTURE_PATH_BYTES)
        return;
    if (sep)
        cs->path[cs->path_len++] = '/';
    memcpy(cs->path + cs->path_len, name, len + 1);
    cs->path_len += len;
}

/* Back to the parent's path, LEN bytes. */
static void path_pop(struct copy_state *cs, size_t len)
{
    cs->path_len = len;
    cs->path[len] = '\0';
}

/* Copies every entry of directory SRC into directory DST but those the capture leaves out
 * (snapshot_exclude.c). FIFOs are made anew; sockets and device nodes (which a sandbox cannot
 * create usefully) are skipped. */
static bool copy_tree(int src, int dst, int depth, struct copy_state *cs)
{
    int fd = dup(src);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return copy_fail(cs, errno, "list");
    }
    bool ok = true;
    struct dirent *e;
    while (ok && (errno = 0, e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(cs->where, sizeof cs->where, "%s", e->d_name);
        if (fstatat(src, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            ok = errno == ENOENT || copy_fail(cs, errno, "read");
            continue;
        }
        size_t parent_len = cs->path_len;
        path_push(cs, e->d_name);
        if (capture_excludes(&cs->exclusions, cs->path, e->d_name, S_ISDIR(st.st_mode)))
            ;   /* left out, with everything under it */
        else if (S_ISDIR(st.st_mode))
            ok = copy_subdir(src, dst, e->d_name, &st, depth, cs);
        else if (S_ISREG(st.st_mode))
            ok = copy_file(src, dst, e->d_name, &st, cs);
        else if (S_ISLNK(st.st_mode))
            ok = copy_symlink(src, dst, e->d_name, &st, cs);
        else if (S_ISFIFO(st.st_mode))
            ok = (mkfifoat(dst, e->d_name, st.st_mode & 0777) == 0 && copy_owner(dst, e->d_name) &&
                  ++cs->files) || copy_fail(cs, errno, "create");
        path_pop(cs, parent_len);
    }
    if (ok && errno != 0)
        ok = copy_fail(cs, errno, "list");
    closedir(d);
    return ok;
}

/* Copies the running workspace WS's /workspace, as its commands see it, to TREE (a new
 * directory). The caller holds WS's lifecycle lock, so its holder and root stay. */
static bool capture_tree(struct workspace *ws, const char *tree, struct copy_state *cs)
{
    int root = fcntl(ws->root_fd, F_DUPFD_CLOEXEC, 0);
    int src = root >= 0 ? openat(root, "workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                        O_CLOEXEC) : -1;
    int dst = -1;
    struct stat st;
    snprintf(cs->where, sizeof cs->where, "/workspace");
    bool ok = (src >= 0 && fstat(src, &st) == 0) || copy_fail(cs, errno, "open");
    ok = ok && capture_exclusions_load(src, &cs->exclusions, cs->err);
    ok = ok && ((mkdir(tree, 0700) == 0 &&
                 (dst = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) ||
                copy_fail(cs, errno, "create"));
    ok = ok && copy_tree(src, dst, 0, cs);
    ok = ok && ((fchmod(dst, st.st_mode & 01777) == 0 &&
                 (!g_config.is_root ||
                  fchown(dst, g_config.sandbox_uid, g_config.sandbox_gid) == 0)) ||
                copy_fail(cs, errno, "set attributes of"));
    ok = ok && (fsync(dst) == 0 || copy_fail(cs, errno, "sync"));
    if (dst >= 0)
        close(dst);
    if (src >= 0)
        close(src);
    if (root >= 0)
        close(root);
    return ok;
}

/* Parses a capture body: "workspace" (required) and "labels" (optional string pairs). */
static bool parse_capture_body(json_t *body, const char **workspace, json_t **labels,
                               struct api_error *err)
{
    *workspace = NULL;
    *labels = NULL;
    if (body && (!json_get_string(body, "workspace", workspace, err) ||
                 !json_get_object(body, "labels", labels, err) ||
                 (*labels && !json_string_map_valid(*labels, "labels", err))))
        return false;
    if (!*workspace) {
        api_error_set(err, 400, "bad_request", "field \"workspace\" is required");
        return false;
    }
    return true;
}

/* Claims ID for a capture: an existing ready snapshot is returned in *EXISTING (the capture
 * is idempotent), one being captured is snapshot_capturing. */
static bool capture_claim(const char *id, json_t **existing, struct api_error *err)
{
    bool ok = false;
    *existing = NULL;
    pthread_mutex_lock(&snap_lock);
    if (capturing_has(id)) {
        api_error_set(err, 409, "snapshot_capturing", "snapshot \"%s\" is being captured", id);
    } else if ((*existing = snapshot_meta(id)) == NULL) {
        struct capturing *c = calloc(1, sizeof *c);
        if (c) {
            snprintf(c->id, sizeof c->id, "%s", id);
            c->next = capturing_list;
            capturing_list = c;
            ok = true;
        } else {
            api_error_from_errno(err, ENOMEM, "cannot start the capture");
        }
    }
    pthread_mutex_unlock(&snap_lock);
    return ok;
}

/* Copies the workspace into <root>/.capture-<id>/tree and records meta.json there; the
 * caller renames it into place. */
static bool capture_into(const char *id, const char *staging, struct workspace *ws,
                         json_t *labels, struct api_error *err, json_t **meta_out)
{
    struct copy_state cs = {.err = err, .buffer = malloc(COPY_BUFFER_BYTES),
                            .path = calloc(1, CAPTURE_PATH_BYTES)};
    char *tree = xasprintf("%s/tree", staging);
    double started = monotonic_ms();
    bool ok = cs.buffer && cs.path ? true : (api_error_from_errno(err, ENOMEM, "capture"), false);
    ok = ok && ((mkdir(staging, 0711) == 0) || copy_fail(&cs, errno, "create"));
    ok = ok && capture_tree(ws, tree, &cs);
    json_t *meta = NULL;
    if (ok) {
        meta = json_pack("{s:s,s:I,s:I,s:I,s:f,s:o}", "workspace", ws->id, "bytes",
                         (json_int_t)cs.bytes, "files", (json_int_t)cs.files, "created_at",
                         (json_int_t)time(NULL), "capture_ms", monotonic_ms() - started,
                         "labels", labels ? json_incref(labels) : json_object());
        char *text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
        char *path = xasprintf("%s/meta.json", staging);
        errno = ENOMEM;
        ok = (text && write_file_atomic(path, text, strlen(text), 0600, true)) ||
             copy_fail(&cs, errno, "record");
        free(path);
        free(text);
    }
    if (!ok) {
        json_decref(meta);
        meta = NULL;
        log_event("snapshot %s: capture of workspace %s failed: %s", id, ws->id, err->message);
    }
    *meta_out = meta;
    free(tree);
    free(cs.buffer);
    free(cs.path);
    capture_exclusions_free(&cs.exclusions);
    return ok;
}

/*
 * PUT /v1/snapshots/{id}: captures workspace "workspace" (running) as snapshot ID. The
 * workspace's commands keep running; its acquire and release wait until the copy is done.
 * Idempotent: a ready snapshot with this id is returned unchanged ("captured": false).
 */
json_t *snapshot_capture(const char *id, json_t *body, struct api_error *err)
{
    const char *ws_id;
    json_t *labels, *existing, *meta = NULL;
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_snapshot_id", "snapshot id is not valid");
        return NULL;
    }
    if (!parse_capture_body(body, &ws_id, &labels, err))
        return NULL;
    if (!g_caps.snapshot) {
        api_error_set(err, 400, "snapshot_unsupported",
                      "this host cannot capture snapshots (snapshot is false)");
        return NULL;
    }
    if (host_disk_refused()) {
        api_error_set(err, 507, "disk_unbounded",
                      "snapshots would share the filesystem of %s and could fill it; give "
                      "workspaces a filesystem of their own (docs/sandboxd.md)",
                      g_config.protect_path);
        return NULL;
    }
    struct workspace *ws = workspace_get(ws_id, err);
    if (!ws)
        return NULL;
    if (!capture_claim(id, &existing, err)) {
        workspace_put(ws);
        if (!existing)
            return NULL;
        json_t *resp = snapshot_describe(id, existing);
        json_object_set_new(resp, "captured", json_false());
        return resp;
    }
    char *root = snapshots_root();
    char *staging = xasprintf("%s/%s%s", root, CAPTURE_PREFIX, id);
    char *dir = snapshot_dir(id);
    if (!mkdir_p(root, 0711))
        log_event("snapshot %s: cannot create %s: %s", id, root, strerror(errno));
    remove_tree(staging);   /* left by a capture that failed to clean up */
    pthread_mutex_lock(&ws->lifecycle);
    bool ok = !ws->removed && workspace_state(ws) == WS_RUNNING && holder_running(ws);
    if (!ok)
        api_error_set(err, 409, "workspace_not_running",
                      "workspace \"%s\" is not running; acquire it before capturing", ws_id);
    ok = ok && capture_into(id, staging, ws, labels, err, &meta);
    pthread_mutex_unlock(&ws->lifecycle);
    pthread_mutex_lock(&snap_lock);
    if (ok && rename(staging, dir) != 0) {
        api_error_from_errno(err, errno, "cannot install the snapshot");
        ok = false;
    }
    capturing_remove(id);
    pthread_mutex_unlock(&snap_lock);
    if (!ok)
        remove_tree(staging);
    else
        log_event("snapshot %s: captured from workspace %s (%lld bytes, %lld files)", id, ws_id,
                  (long long)json_integer_value(json_object_get(meta, "bytes")),
                  (long long)json_integer_value(json_object_get(meta, "files")));
    free(dir);
    free(staging);
    free(root);
    workspace_put(ws);
    if (!ok) {
        json_decref(meta);
        return NULL;
    }
    json_t *resp = snapshot_describe(id, meta);
    json_object_set_new(resp, "captured", json_true());
    return resp;
}

/* Start-up: removes what captures and deletes left half done (a daemon killed meanwhile)
 * and snapshot directories without a valid meta.json. (.snapshots is made by the first
 * capture, so a daemon that never captured leaves nothing beside its workspaces.) */
void snapshots_init(void)
{
    char *root = snapshots_root();
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *name = e->d_name;
        bool leftover = strncmp(name, CAPTURE_PREFIX, strlen(CAPTURE_PREFIX)) == 0 ||
                        strncmp(name, TRASH_PREFIX, strlen(TRASH_PREFIX)) == 0;
        json_t *meta = NULL;
        if (!leftover && (name[0] == '.' || !workspace_id_valid(name)))
            continue;
        if (!leftover && (meta = snapshot_meta(name)) != NULL) {
            json_decref(meta);
            continue;
        }
        char *path = xasprintf("%s/%s", root, name);
        log_event("snapshot: removing %s (%s)", path,
                  leftover ? "left by an interrupted capture or delete" : "no valid state");
        remove_tree(path);
        free(path);
    }
    if (d)
        closedir(d);
    free(root);
}
