/*
 * workspace.h - a workspace's lifecycle as the API sees it: acquire (create or wake), release
 * (destroy or hibernate), list, describe, and the start-up load and the drain (workspace.c).
 */
#ifndef MESH_SANDBOXD_WORKSPACE_H
#define MESH_SANDBOXD_WORKSPACE_H

#include <jansson.h>
#include "json.h"
#include "registry.h"

void workspaces_init(void);
json_t *workspace_acquire(const char *id, json_t *body, struct api_error *err);
json_t *workspace_release(const char *id, json_t *body, struct api_error *err);
json_t *workspace_list(const char *label_filter, struct api_error *err);
json_t *workspace_describe(struct workspace *ws);
void workspaces_kill_background(void);
void workspaces_sweep_background(void);
void workspaces_hibernate_all(void);
void workspaces_kill_execs(void);

#endif
