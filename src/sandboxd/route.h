/*
 * route.h - the API's paths matched to routes, split re-entrantly (route.c).
 */
#ifndef MESH_SANDBOXD_ROUTE_H
#define MESH_SANDBOXD_ROUTE_H


#define ROUTE_MAX_SEGMENTS 8
enum route_kind {
    /* the list routes first: from ROUTE_WORKSPACE on, a route names one object (fuzz_route) */
    ROUTE_NONE, ROUTE_CAPABILITIES, ROUTE_WORKSPACES, ROUTE_SNAPSHOTS, ROUTE_WORKSPACE, ROUTE_EXEC,
    ROUTE_FILES, ROUTE_KILL, ROUTE_EXTEND, ROUTE_EXEC_OUTPUT, ROUTE_EXEC_RECORD, ROUTE_SNAPSHOT, ROUTE_REFUSED
};
struct route_path {
    char *text;                              /* the request's own copy of the path */
    char *segments[ROUTE_MAX_SEGMENTS];
    int count;
};
enum route_kind route_match(const char *url, struct route_path *path);
void route_path_free(struct route_path *path);

#endif
