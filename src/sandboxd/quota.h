/*
 * quota.h - per-workspace disk quotas (a btrfs subvolume slot per workspace, pooled per
 * tier) and inotify bounds (quota.c).
 */
#ifndef MESH_SANDBOXD_QUOTA_H
#define MESH_SANDBOXD_QUOTA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>
#include "registry.h"
#include "tiers.h"

uint64_t quota_tier_limit(const struct size_tier *tier, uint64_t disk_bytes);
bool quota_setup_host(const char *mountpoint, uint64_t disk_bytes, unsigned slots, uid_t uid,
                      gid_t gid, json_t *record);
void quota_init(void);
bool quota_layout(void);
uint64_t quota_tier_bytes(const struct size_tier *tier);
bool quota_slot_take(const struct size_tier *tier, const char *dir);
bool quota_slot_return(const char *dir);
bool quota_full(const char *id);
bool quota_inotify_bound(struct workspace *ws);

#endif
