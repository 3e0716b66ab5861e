/*
 * cgroup.c - per-workspace cgroup v1 groups: memory, pids, cpu (limits by tier) and cpuacct.
 *
 * Layout: /sys/fs/cgroup/<controller>/<cgroup-name>/<workspace id>. The holder and every exec
 * of a workspace are attached to these groups, so the tier's limits cover the whole workspace.
 * Where a hierarchy is not writable (non-root) the controller is reported unavailable and the
 * matching capability is declared false.
 */
#include "sandboxd.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *controller_names[CG_COUNT] = {"memory", "pids", "cpu", "cpuacct"};
static bool controller_ok[CG_COUNT];

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

/* Creates our subtree in each hierarchy; a controller is usable only if that works (root). */
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
 * (kept open so an exec joins with one write each). Unavailable controllers get fd -1. */
bool cgroup_workspace_create(const char *id, const struct size_tier *tier, int procs_fds[CG_COUNT])
{
    bool ok = true;
    for (int c = 0; c < CG_COUNT; c++) {
        procs_fds[c] = -1;
        if (!controller_ok[c] || !ok)
            continue;
        char *dir = cgroup_path(c, id);
        char *procs = xasprintf("%s/cgroup.procs", dir);
        ok = (mkdir(dir, 0755) == 0 || errno == EEXIST) && cgroup_apply_tier(c, dir, tier);
        if (ok)
            procs_fds[c] = open(procs, O_WRONLY | O_CLOEXEC);
        ok = ok && procs_fds[c] >= 0;
        free(procs);
        free(dir);
    }
    if (!ok) {
        cgroup_close_fds(procs_fds);
        cgroup_workspace_remove(id);
    }
    return ok;
}

/* Closes the cached cgroup.procs descriptors. */
void cgroup_close_fds(int procs_fds[CG_COUNT])
{
    for (int c = 0; c < CG_COUNT; c++) {
        if (procs_fds[c] >= 0)
            close(procs_fds[c]);
        procs_fds[c] = -1;
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

/* Removes the workspace's groups, killing leftovers and retrying while they die (bounded). */
void cgroup_workspace_remove(const char *id)
{
    for (int c = 0; c < CG_COUNT; c++) {
        if (!controller_ok[c])
            continue;
        char *dir = cgroup_path(c, id);
        for (int attempt = 0; attempt < 2000; attempt++) {
            if (rmdir(dir) == 0 || errno == ENOENT)
                break;
            cgroup_kill_members(dir);
            usleep(1000);
        }
        free(dir);
    }
}

/* The workspace memory group's oom_kill counter (0 without the memory controller). */
uint64_t cgroup_workspace_oom_kills(const char *id)
{
    if (!controller_ok[CG_MEMORY])
        return 0;
    char *dir = cgroup_path(CG_MEMORY, id);
    char *path = xasprintf("%s/memory.oom_control", dir);
    FILE *f = fopen(path, "re");
    char key[64];
    unsigned long long value, kills = 0;
    free(path);
    free(dir);
    while (f && fscanf(f, "%63s %llu", key, &value) == 2)
        if (strcmp(key, "oom_kill") == 0)
            kills = value;
    if (f)
        fclose(f);
    return kills;
}
