/*
 * cgroup.c - per-workspace cgroup v1 groups: memory, pids, cpu (limits by tier) and cpuacct.
 *
 * Layout: /sys/fs/cgroup/<controller>/<cgroup-name>/<workspace id>. The holder and every exec
 * of a workspace are attached to these groups, so the tier's limits cover the whole workspace.
 * Each exec also gets a memory and a cpuacct group of its own below the workspace's
 * (.../<id>/exec-<n>, a slot reused by later execs): the workspace's limit still covers it,
 * the memory group's oom_kill counter says whether the kernel killed a process of this exec
 * and no other, and the cpuacct group counts the CPU of every process of it.
 *
 * A root daemon creates its subtree itself. A non-root daemon (the embedded one) uses a subtree
 * root delegated to its user at install time (`mesh-sandboxd --setup-host`, cgroup_delegate):
 * the subtree directory and its cgroup.procs/tasks belong to that user, groups it creates below
 * belong to it too, and cgroup v1 lets a process move tasks of its own uid. Where a hierarchy is
 * not writable the controller is reported unavailable and the matching capability is false.
 */
#include "cgroup.h"
#include "config.h"
#include "log.h"
#include "tiers.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *controller_names[CG_COUNT] = {"memory", "pids", "cpu", "cpuacct"};
static bool controller_ok[CG_COUNT];

static void remove_exec_groups(const char *dir, bool kill);

/* Directory of our subtree (ID NULL) or of one workspace in CONTROLLER's hierarchy. */
static char *cgroup_path(int controller, const char *id)
{
    if (id)
        return xasprintf("/sys/fs/cgroup/%s/%s/%s", controller_names[controller],
                         g_config.cgroup_name, id);
    return xasprintf("/sys/fs/cgroup/%s/%s", controller_names[controller], g_config.cgroup_name);
}

/* Writes a short value to a control file; false (and a log line) on failure. */
static bool cgroup_write(const char *dir, const char *file, const char *value)
{
    char *path = xasprintf("%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value);
    if (!ok)
        log_event("cgroup: cannot write %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(path);
    return ok;
}

/* Creates our subtree in each hierarchy (or finds the delegated one); a controller is usable
 * only if we may attach tasks to it. */
void cgroup_init(void)
{
    for (int c = 0; c < CG_COUNT; c++) {
        char *dir = cgroup_path(c, NULL);
        char *procs = xasprintf("%s/cgroup.procs", dir);
        controller_ok[c] = (mkdir(dir, 0755) == 0 || errno == EEXIST) &&
                           access(procs, W_OK) == 0;
        free(procs);
        free(dir);
    }
}

/* Whether CONTROLLER can be used on this host by this daemon. */
bool cgroup_available(int controller)
{
    return controller_ok[controller];
}

/* Writes the tier's limits into a fresh workspace group of CONTROLLER. */
static bool cgroup_apply_tier(int controller, const char *dir, const struct size_tier *tier)
{
    char value[64];
    switch (controller) {
    case CG_MEMORY:
        snprintf(value, sizeof value, "%llu", (unsigned long long)tier->memory_mb << 20);
        return cgroup_write(dir, "memory.limit_in_bytes", value);
    case CG_PIDS:
        snprintf(value, sizeof value, "%u", tier->pids);
        return cgroup_write(dir, "pids.max", value);
    case CG_CPU:
        snprintf(value, sizeof value, "%ld", (long)(tier->cpus * 100000));
        return cgroup_write(dir, "cpu.cfs_period_us", "100000") &&
               cgroup_write(dir, "cpu.cfs_quota_us", value);
    default:
        return true;
    }
}

/* Creates the workspace's groups with the tier's limits and opens their cgroup.procs files
 * (kept open so a holder joins with one write each) and the memory group's oom_control and
 * max_usage_in_bytes (read or written by every exec). Unavailable controllers get fd -1. */
bool cgroup_workspace_create(const char *id, const struct size_tier *tier, int fds[CG_FILES])
{
    bool ok = true;
    for (int f = 0; f < CG_FILES; f++)
        fds[f] = -1;
    for (int c = 0; c < CG_COUNT && ok; c++) {
        if (!controller_ok[c])
            continue;
        char *dir = cgroup_path(c, id);
        char *procs = xasprintf("%s/cgroup.procs", dir);
        ok = (mkdir(dir, 0755) == 0 || errno == EEXIST) && cgroup_apply_tier(c, dir, tier);
        if (ok)
            fds[c] = open(procs, O_WRONLY | O_CLOEXEC);
        ok = ok && fds[c] >= 0;
        if (ok && c == CG_MEMORY) {
            char *oom = xasprintf("%s/memory.oom_control", dir);
            char *peak = xasprintf("%s/memory.max_usage_in_bytes", dir);
            fds[CG_OOM_CONTROL] = open(oom, O_RDONLY | O_CLOEXEC);
            fds[CG_PEAK] = open(peak, O_RDWR | O_CLOEXEC);
            ok = fds[CG_OOM_CONTROL] >= 0 && fds[CG_PEAK] >= 0;
            free(oom);
            free(peak);
        }
        free(procs);
        free(dir);
    }
    if (!ok) {
        cgroup_close_fds(fds);
        cgroup_workspace_remove(id);
    }
    return ok;
}

/* Closes the workspace's open cgroup files. */
void cgroup_close_fds(int fds[CG_FILES])
{
    for (int f = 0; f < CG_FILES; f++) {
        if (fds[f] >= 0)
            close(fds[f]);
        fds[f] = -1;
    }
}

/* SIGKILLs every task still listed in DIR/cgroup.procs; returns how many were found. */
static int cgroup_kill_members(const char *dir)
{
    char *path = xasprintf("%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    int found = 0;
    long pid;
    free(path);
    if (!f)
        return 0;
    while (fscanf(f, "%ld", &pid) == 1) {
        kill((pid_t)pid, SIGKILL);
        found++;
    }
    fclose(f);
    return found;
}

/* Removes group DIR and its exec groups, retrying every millisecond (ATTEMPTS times) while
 * what runs in them dies. With KILL, what runs there is killed; without, nothing is, and only a
 * group whose processes are already dying (EBUSY) is waited for. 0, or why DIR remains. */
static int remove_group(const char *dir, bool kill, int attempts)
{
    int error = 0;
    for (int attempt = 0; attempt < attempts; attempt++) {
        remove_exec_groups(dir, kill);
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        error = errno;
        if (!kill && error != EBUSY)
            break;
        if (kill)
            cgroup_kill_members(dir);
        usleep(1000);
    }
    return error;
}

/* Removes the workspace's groups, killing leftovers and retrying while they die (bounded). */
void cgroup_workspace_remove(const char *id)
{
    for (int c = 0; c < CG_COUNT; c++) {
        if (!controller_ok[c])
            continue;
        char *dir = cgroup_path(c, id);
        remove_group(dir, true, 2000);
        free(dir);
    }
}

/* Renames workspace FROM's groups to TO in every hierarchy (cgroup v1 renames a group within
 * its parent; its tasks, limits, exec slots and open control files stay): a standby holder
 * becomes a workspace's. Where two controllers share a hierarchy the second rename finds its
 * group moved already. False when a group could not be renamed; the caller removes both
 * names. */
bool cgroup_workspace_rename(const char *from, const char *to)
{
    bool ok = true;
    for (int c = 0; c < CG_COUNT && ok; c++) {
        if (!controller_ok[c])
            continue;
        char *old_dir = cgroup_path(c, from);
        char *new_dir = cgroup_path(c, to);
        struct stat st;
        ok = rename(old_dir, new_dir) == 0 || (errno == ENOENT && stat(new_dir, &st) == 0);
        if (!ok)
            log_event("cgroup: cannot rename %s to %s: %s", old_dir, new_dir, strerror(errno));
        free(old_dir);
        free(new_dir);
    }
    return ok;
}

/* Start-up: removes the groups of our subtree whose name MATCHES. With KILL (standbys a
 * previous run left) what still runs in them is killed first; without, a group is removed only
 * when nothing runs in it (a leftover of no workspace: the strays in it were killed already,
 * and a subtree some other daemon was given by mistake loses nothing that runs). */
void cgroup_remove_matching(bool (*matches)(const char *name), bool kill)
{
    for (int c = 0; c < CG_COUNT; c++) {
        if (!controller_ok[c])
            continue;
        char *root = cgroup_path(c, NULL);
        DIR *d = opendir(root);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_type != DT_DIR || !matches(e->d_name))
                continue;
            char *dir = cgroup_path(c, e->d_name);
            int error = remove_group(dir, kill, kill ? 2000 : 200);
            if (error)
                log_event("cgroup: %s kept: %s", dir, strerror(error));
            free(dir);
        }
        if (d)
            closedir(d);
        free(root);
    }
}

/* Reads control file DIR/FILE into BUF (NUL-terminated) with plain system calls: these are
 * read several times per exec. False when it cannot be read. */
static bool read_control(const char *dir, const char *file, char *buf, size_t size)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n > 0;
}

/* The oom_kill counter in the text of a memory.oom_control file (0 when absent). In cgroup v1
 * a kill is counted only in the group of the killed process, not in its ancestors. */
static uint64_t oom_kills_of(const char *text)
{
    const char *line = strstr(text, "\noom_kill ");
    return line ? strtoull(line + 10, NULL, 10) : 0;
}

/* The oom_kill counter of the memory group DIR (0 when unreadable). */
static uint64_t oom_kills_in(const char *dir)
{
    char buf[512];
    return read_control(dir, "memory.oom_control", buf, sizeof buf) ? oom_kills_of(buf) : 0;
}

/* Reads the open control file FD from its start into BUF (NUL-terminated); false when it
 * cannot be read. */
static bool read_open_control(int fd, char *buf, size_t size)
{
    ssize_t n = fd >= 0 ? pread(fd, buf, size - 1, 0) : -1;
    buf[n > 0 ? n : 0] = '\0';
    return n > 0;
}

/* Directory of exec slot SLOT's group inside workspace ID in CONTROLLER's hierarchy. */
static char *exec_group_path(int controller, const char *id, int slot)
{
    char *ws = cgroup_path(controller, id);
    char *dir = xasprintf("%s/exec-%d", ws, slot);
    free(ws);
    return dir;
}

/* Reads the unsigned number at the start of DIR/FILE; -1 when there is none. */
static long long read_number(const char *dir, const char *file)
{
    char buf[64], *end;
    if (!read_control(dir, file, buf, sizeof buf))
        return -1;
    unsigned long long value = strtoull(buf, &end, 10);
    return end == buf ? -1 : (long long)value;
}

/* What an exec's own group is kept for: the OOM kills of its memory group, the CPU time (ns)
 * of its cpuacct group, whose processes are counted even when killed before anything reaped
 * them (a timeout, background jobs at the end of the exec). */
static uint64_t exec_group_counter(int controller, const char *dir)
{
    long long ns = controller == CG_CPUACCT ? read_number(dir, "cpuacct.usage") : 0;
    return controller == CG_MEMORY ? oom_kills_in(dir) : ns > 0 ? (uint64_t)ns : 0;
}

/* Opens exec slot SLOT's group below workspace ID's in CONTROLLER's hierarchy (memory or
 * cpuacct), creating it when CREATE (its first use since the workspace started), and returns
 * its cgroup.procs; -1 without the controller. Slots are kept until the workspace stops:
 * creating and removing a group per exec would cost more than the exec itself. */
int cgroup_exec_group_open(int controller, const char *id, int slot, bool create)
{
    if (!controller_ok[controller])
        return -1;
    char *dir = exec_group_path(controller, id, slot);
    char *procs = xasprintf("%s/cgroup.procs", dir);
    int fd = !create || mkdir(dir, 0755) == 0 || errno == EEXIST
                 ? open(procs, O_WRONLY | O_CLOEXEC) : -1;
    free(procs);
    free(dir);
    return fd;
}

/* Creates exec slot SLOT's groups of workspace ID ahead of its first exec (a new memory
 * group costs about a millisecond); the holder start does it while bubblewrap sets up. */
void cgroup_exec_slot_prepare(const char *id, int slot)
{
    static const int controllers[] = {CG_MEMORY, CG_CPUACCT};
    for (size_t i = 0; i < 2; i++) {
        if (!controller_ok[controllers[i]])
            continue;
        char *dir = exec_group_path(controllers[i], id, slot);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            log_event("cgroup: cannot create %s: %s", dir, strerror(errno));
        free(dir);
    }
}

/* The counter of exec slot SLOT's group of CONTROLLER in workspace ID (see above). */
uint64_t cgroup_exec_group_counter(int controller, const char *id, int slot)
{
    if (!controller_ok[controller])
        return 0;
    char *dir = exec_group_path(controller, id, slot);
    uint64_t value = exec_group_counter(controller, dir);
    free(dir);
    return value;
}

/* The oom_kill counter of the workspace's own memory group (where its holder is), from its
 * open files FDS; 0 without the controller. */
uint64_t cgroup_workspace_oom_kills(const int fds[CG_FILES])
{
    char buf[512];
    return read_open_control(fds[CG_OOM_CONTROL], buf, sizeof buf) ? oom_kills_of(buf) : 0;
}

/* Starts a new peak-memory window for the workspace (the peak becomes the current usage). */
void cgroup_peak_reset(const int fds[CG_FILES])
{
    if (fds[CG_PEAK] >= 0 && pwrite(fds[CG_PEAK], "0", 1, 0) != 1)
        log_event("cgroup: cannot reset a workspace's memory peak: %s", strerror(errno));
}

/* The workspace's peak memory (bytes, incl. tmpfs pages) since the last reset; -1 without
 * the memory controller. */
long long cgroup_peak_bytes(const int fds[CG_FILES])
{
    char buf[64], *end;
    if (!read_open_control(fds[CG_PEAK], buf, sizeof buf))
        return -1;
    unsigned long long value = strtoull(buf, &end, 10);
    return end == buf ? -1 : (long long)value;
}

/* Removes the per-exec groups below workspace group DIR (a crash may have left them), killing
 * what runs in them with KILL. */
static void remove_exec_groups(const char *dir, bool kill)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "exec-", 5) != 0)
            continue;
        char *sub = xasprintf("%s/%s", dir, e->d_name);
        if (kill)
            cgroup_kill_members(sub);
        rmdir(sub);
        free(sub);
    }
    if (d)
        closedir(d);
}

/* ---- install-time delegation (mesh-sandboxd --setup-host, as root) ---- */

/* Gives UID the subtree NAME in every v1 hierarchy this daemon uses: the directory (so it may
 * create groups below) and its cgroup.procs and tasks (so it may attach its own processes).
 * Control files of the subtree root stay root's. A hierarchy the host does not mount (a
 * cgroup v2 host) is reported, not an error: the capability will say it; a failure to delegate
 * one that exists is. */
bool cgroup_delegate(const char *name, uid_t uid, gid_t gid)
{
    bool ok = true;
    for (int c = 0; c < CG_COUNT; c++) {
        char *root = xasprintf("/sys/fs/cgroup/%s", controller_names[c]);
        char *dir = xasprintf("%s/%s", root, name);
        char *procs = xasprintf("%s/cgroup.procs", dir);
        char *tasks = xasprintf("%s/tasks", dir);
        struct stat st;
        if (stat(root, &st) != 0) {
            printf("no cgroup v1 %s hierarchy at %s: %s limits are not enforced here (cgroup "
                   "v2 hosts: see docs/sandboxd.md)\n", controller_names[c], root,
                   controller_names[c]);
        } else if (!mkdir_p(dir, 0755) || chown(dir, uid, gid) != 0 ||
                   chown(procs, uid, gid) != 0 || chown(tasks, uid, gid) != 0) {
            fprintf(stderr, "mesh-sandboxd: cannot delegate %s: %s\n", dir, strerror(errno));
            ok = false;
        } else {
            printf("delegated %s to uid %d\n", dir, (int)uid);
        }
        free(tasks);
        free(procs);
        free(dir);
        free(root);
    }
    return ok;
}
