/*
 * single.h - single-workspace mode: the one id a daemon serves, and the routes it refuses
 * (single.c).
 */
#ifndef MESH_SANDBOXD_SINGLE_H
#define MESH_SANDBOXD_SINGLE_H

#include <stdbool.h>
#include "route.h"

bool single_workspace_valid(const char *id);
bool single_workspace_refuses(enum route_kind kind, const struct route_path *path);

#endif
