/*
 * background.h - background execs' records: their buffered output, end, expiry and the
 * supervisors' count (background.c).
 */
#ifndef MESH_SANDBOXD_BACKGROUND_H
#define MESH_SANDBOXD_BACKGROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "capture.h"
#include "json.h"
#include "registry.h"

/* What GET .../execs/{key}/output asks, per stream (stdout, stderr): where the answer's bytes
 * start, and before which they are acknowledged (ack <= from); then the wait and the size. */
struct output_query {
    uint64_t from[2];
    uint64_t ack[2];
    uint64_t wait_ms;
    size_t max_bytes;
};
struct background *background_new(const char *key);
void background_put(struct background *bg);
void background_link_locked(struct workspace *ws, struct background *bg);
void background_unlink(struct workspace *ws, struct background *bg);
bool background_key_taken_locked(struct workspace *ws, const char *key);
size_t background_count_locked(struct workspace *ws);
void background_drop(struct workspace *ws, bool expired_only);
int background_wake_fd(struct background *bg);
void background_wake_clear(struct background *bg);
bool background_room(struct background *bg, int stream);
bool background_read(struct background *bg, int stream, int fd, bool ended);
void background_end(struct background *bg, json_t *end);
void background_supervisor_count(int delta);
void background_wait_supervisors(void);
json_t *background_output(struct workspace *ws, const char *key, const struct output_query *q,
                          struct exec_output *raw, struct api_error *err);
bool background_forget(struct workspace *ws, const char *key, struct api_error *err);

#endif
