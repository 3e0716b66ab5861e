/*
 * exec.h - running a command in a workspace through its exec agent, waiting or in the
 * background, and killing it by key (exec.c).
 */
#ifndef MESH_SANDBOXD_EXEC_H
#define MESH_SANDBOXD_EXEC_H

#include <stdbool.h>
#include <jansson.h>
#include "capture.h"
#include "json.h"
#include "registry.h"

json_t *exec_run_request(struct workspace *ws, json_t *body, struct exec_output *raw,
                         struct api_error *err);
bool exec_kill_by_key(struct workspace *ws, const char *key, int sig);
void exec_kill_all(struct workspace *ws, bool background_only);
bool exec_signal_parse(json_t *body, int *sig, struct api_error *err);

/* The most one extend call adds: 7 days, the longest timeout the extension gives a command. */
#define EXEC_EXTEND_MAX_MS 604800000ull

enum exec_extend_result { EXEC_EXTENDED, EXEC_ENDED, EXEC_UNKNOWN };
enum exec_extend_result exec_extend_by_key(struct workspace *ws, const char *key, uint64_t by_ms,
                                           uint64_t *total_ms);
bool exec_extend_parse(json_t *body, uint64_t *by_ms, struct api_error *err);

#endif
