/*
 * reaper.h - how a request thread hands the main thread a child to reap: the watch pipe of
 * pidfds (reaper.c); the main thread's loop (main.c) reads its other end.
 */
#ifndef MESH_SANDBOXD_REAPER_H
#define MESH_SANDBOXD_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

bool reaper_watch_open(void);
int reaper_watch_fd(void);
void reaper_watch(pid_t pid);

#endif
