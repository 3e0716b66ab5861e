/*
 * route.c - request routing: splits a request path into segments and names the route.
 *
 * Pure and re-entrant: no hidden state (strtok's would be shared by every connection thread,
 * so one request could be routed with another's segments), no MHD types, so the fuzzer
 * (test/fuzz/) can feed it arbitrary bytes.
 */
#include "route.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Splits URL on '/' (empty segments skipped) into PATH, which owns a copy of the text.
 * False when there are more than ROUTE_MAX_SEGMENTS segments or memory runs out. */
static bool split_path(const char *url, struct route_path *path)
{
    path->count = 0;
    path->text = strdup(url);
    if (!path->text)
        return false;
    for (char *p = path->text; *p;) {
        while (*p == '/')
            *p++ = '\0';
        if (!*p)
            break;
        if (path->count == ROUTE_MAX_SEGMENTS)
            return false;
        path->segments[path->count++] = p;
        p += strcspn(p, "/");
    }
    return true;
}

/* Segment I of PATH equals WORD. */
static bool segment_is(const struct route_path *path, int i, const char *word)
{
    return i < path->count && strcmp(path->segments[i], word) == 0;
}

/* Names the route of URL; PATH keeps its segments (free with route_path_free). The workspace
 * or snapshot id, when the route has one, is segments[2]; an exec key segments[4]. */
enum route_kind route_match(const char *url, struct route_path *path)
{
    if (!split_path(url, path) || !segment_is(path, 0, "v1"))
        return ROUTE_NONE;
    if (path->count == 2 && segment_is(path, 1, "capabilities"))
        return ROUTE_CAPABILITIES;
    if (segment_is(path, 1, "snapshots"))
        return path->count == 2 ? ROUTE_SNAPSHOTS : path->count == 3 ? ROUTE_SNAPSHOT : ROUTE_NONE;
    if (!segment_is(path, 1, "workspaces"))
        return ROUTE_NONE;
    if (path->count == 2)
        return ROUTE_WORKSPACES;
    if (path->count == 3)
        return ROUTE_WORKSPACE;
    if (path->count == 4 && segment_is(path, 3, "exec"))
        return ROUTE_EXEC;
    if (path->count == 4 && segment_is(path, 3, "files"))
        return ROUTE_FILES;
    if (path->count == 6 && segment_is(path, 3, "execs") && segment_is(path, 5, "kill"))
        return ROUTE_KILL;
    if (path->count == 6 && segment_is(path, 3, "execs") && segment_is(path, 5, "extend"))
        return ROUTE_EXTEND;
    if (path->count == 6 && segment_is(path, 3, "execs") && segment_is(path, 5, "output"))
        return ROUTE_EXEC_OUTPUT;
    if (path->count == 5 && segment_is(path, 3, "execs"))
        return ROUTE_EXEC_RECORD;
    return ROUTE_NONE;
}

/* Frees the text route_match copied. */
void route_path_free(struct route_path *path)
{
    free(path->text);
    path->text = NULL;
    path->count = 0;
}
