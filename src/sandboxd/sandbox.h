/*
 * sandbox.h - the bubblewrap holder of a workspace, whose process is its exec agent: start,
 * adopt, stop, and the host commands and process checks around it (sandbox.c).
 */
#ifndef MESH_SANDBOXD_SANDBOX_H
#define MESH_SANDBOXD_SANDBOX_H

#include <stdbool.h>
#include <sys/types.h>
#include "json.h"
#include "registry.h"

void sandbox_init(void);
bool sandbox_start(struct workspace *ws, struct api_error *err);
bool sandbox_adopt(struct workspace *ws);
void sandbox_stop(struct workspace *ws);
void sandbox_close_fds(struct workspace *ws);
bool run_host_command(char *const argv[]);
bool process_start_time(pid_t pid, unsigned long long *start, char *state);
bool holder_running(struct workspace *ws);
bool holder_ends_within(struct workspace *ws, int ms);
void sandbox_kill_strays(bool (*registered)(const char *id, pid_t holder_pid));

#endif
