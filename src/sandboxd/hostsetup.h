/*
 * hostsetup.h - install-time host preparation (--setup) and the host.json it leaves, read at
 * every start (hostsetup.c).
 */
#ifndef MESH_SANDBOXD_HOSTSETUP_H
#define MESH_SANDBOXD_HOSTSETUP_H

#include <stdbool.h>
#include <stddef.h>

int host_setup(const char *user, size_t disk_bytes, unsigned quota_slots, bool cgroup_name_given,
               bool expedite_rcu);
void host_config_load(void);
bool host_disk_isolated(void);
bool host_disk_refused(void);

#endif
