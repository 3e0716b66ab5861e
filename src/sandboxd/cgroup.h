/*
 * cgroup.h - cgroups v1: each workspace's groups under our subtree of every controller, the
 * per-exec groups inside them, and the counters read from them (cgroup.c).
 */
#ifndef MESH_SANDBOXD_CGROUP_H
#define MESH_SANDBOXD_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "tiers.h"

enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_CPUACCT, CG_COUNT };
/* A running workspace's open cgroup files: cgroup.procs of each controller, then two memory
 * control files read or written by every exec. */
enum { CG_OOM_CONTROL = CG_COUNT, CG_PEAK, CG_FILES };
bool cgroup_available(int controller);
bool cgroup_workspace_create(const char *id, const struct size_tier *tier, int fds[CG_FILES]);
bool cgroup_workspace_rename(const char *from, const char *to);
void cgroup_remove_matching(bool (*matches)(const char *name), bool kill);
void cgroup_workspace_remove(const char *id);
void cgroup_close_fds(int fds[CG_FILES]);
int cgroup_exec_group_open(int controller, const char *id, int slot, bool create);
uint64_t cgroup_exec_group_counter(int controller, const char *id, int slot);
void cgroup_exec_slot_prepare(const char *id, int slot);
uint64_t cgroup_workspace_oom_kills(const int fds[CG_FILES]);
void cgroup_peak_reset(const int fds[CG_FILES]);
long long cgroup_peak_bytes(const int fds[CG_FILES]);
bool cgroup_delegate(const char *name, uid_t uid, gid_t gid);
void cgroup_init(void);

#endif
