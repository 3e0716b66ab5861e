/*
 * snapshot.h - project-state snapshots: capture a workspace's files, list, delete, and start
 * workspaces on them as an overlay (snapshot.c).
 */
#ifndef MESH_SANDBOXD_SNAPSHOT_H
#define MESH_SANDBOXD_SNAPSHOT_H

#include <stdbool.h>
#include <jansson.h>
#include "json.h"
#include "registry.h"

bool snapshot_detect(void);
void snapshots_init(void);
void snapshot_lock(void);
void snapshot_unlock(void);
bool snapshot_usable(const char *id, struct api_error *err);
bool snapshot_make_work_dir(struct workspace *ws);
bool snapshot_mount(struct workspace *ws, struct api_error *err);
json_t *snapshot_capture(const char *id, json_t *body, struct api_error *err);
json_t *snapshot_get(const char *id, struct api_error *err);
json_t *snapshot_list(const char *label_filter, struct api_error *err);
json_t *snapshot_delete(const char *id, struct api_error *err);

#endif
