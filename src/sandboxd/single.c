/*
 * single.c - single-workspace mode (--single-workspace ID): the daemon inside a Kubernetes pod
 * serves exactly one workspace, the pod's own, so a request naming any other id is refused
 * before a handler runs (one pod is one workspace; nothing else may be created there), and so
 * is every snapshot route: a snapshot kept on a pod's disk would go with the pod, and nothing
 * but the workspace's own files may fill that disk.
 */
#include "single.h"
#include "config.h"
#include "route.h"
#include <ctype.h>
#include <string.h>

/* An id the routes can carry as one path segment, like the extension's refs. */
bool single_workspace_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 128)
        return false;
    for (const char *p = id; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return false;
    return true;
}

/* Whether KIND (with the workspace id in segments[2]) is a route this mode refuses: one naming
 * another workspace, or a snapshot route. */
bool single_workspace_refuses(enum route_kind kind, const struct route_path *path)
{
    bool names_workspace = kind == ROUTE_WORKSPACE || kind == ROUTE_EXEC ||
                           kind == ROUTE_FILES || kind == ROUTE_KILL || kind == ROUTE_EXTEND ||
                           kind == ROUTE_EXEC_OUTPUT || kind == ROUTE_EXEC_RECORD;
    if (!g_config.single_workspace)
        return false;
    if (kind == ROUTE_SNAPSHOTS || kind == ROUTE_SNAPSHOT)
        return true;
    return names_workspace && strcmp(path->segments[2], g_config.single_workspace) != 0;
}
