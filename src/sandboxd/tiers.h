/*
 * tiers.h - the size tiers (small, standard, large, xlarge): one table of memory, CPU, pid,
 * disk and inotify limits that cgroup.c, quota.c and the capabilities document read (tiers.c).
 */
#ifndef MESH_SANDBOXD_TIERS_H
#define MESH_SANDBOXD_TIERS_H

#include <stddef.h>

struct size_tier {
    const char *name;
    unsigned memory_mb;
    double cpus;
    unsigned pids;
    unsigned disk_mb;            /* files (data and metadata), at most a quarter of the disk */
    unsigned inotify_instances;  /* in the sandbox's user namespace */
    unsigned inotify_watches;
};
const struct size_tier *tier_by_name(const char *name);
const struct size_tier *tier_table(size_t *count);

#endif
