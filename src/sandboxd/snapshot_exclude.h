/*
 * snapshot_exclude.h - what a capture leaves out: /workspace/.meshignore's patterns and the daemon's
 * own temporary files (snapshot_exclude.c).
 */
#ifndef MESH_SANDBOXD_SNAPSHOT_EXCLUDE_H
#define MESH_SANDBOXD_SNAPSHOT_EXCLUDE_H

#include <stdbool.h>
#include "json.h"

#define MESHIGNORE_MAX_BYTES (64 * 1024)   /* a larger /workspace/.meshignore refuses the capture */
#define MESHIGNORE_MAX_PATTERNS 512   /* 512 cost ~50 us of matching per entry captured */
struct capture_exclusions {
    struct exclude_pattern *patterns;
    int count;
    char *text;   /* the list as read; the patterns point into it */
};
bool capture_exclusions_load(int workspace, struct capture_exclusions *ex, struct api_error *err);
bool capture_exclusions_parse(char *text, struct capture_exclusions *ex, struct api_error *err);
bool capture_excludes(const struct capture_exclusions *ex, const char *path, const char *name,
                      bool is_dir);
void capture_exclusions_free(struct capture_exclusions *ex);

#endif
