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

#endif
