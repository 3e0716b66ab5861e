/*
 * workspace_dirs.h - a workspace's (or a standby's) directories: made inside a quota slot,
 * removed with the slot returned (workspace_dirs.c).
 */
#ifndef MESH_SANDBOXD_WORKSPACE_DIRS_H
#define MESH_SANDBOXD_WORKSPACE_DIRS_H

#include <stdbool.h>
#include "registry.h"

bool workspace_make_dirs(struct workspace *ws);
bool workspace_dir_remove(const char *dir);

#endif
