/*
 * reaper.c - the watch pipe: request threads write pidfds of children the main thread must
 * reap into it (reaper_watch); main.c's reaper loop polls its read end.
 */
#include "reaper.h"
#include "log.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Request threads hand the main thread pidfds of the children it must reap over this pipe
 * (reaper_watch); its write end never blocks. */
static int watch_pipe[2] = {-1, -1};

/* Creates the watch pipe (main thread, before any other thread). */
bool reaper_watch_open(void)
{
    return pipe2(watch_pipe, O_CLOEXEC | O_NONBLOCK) == 0;
}

/* The pipe's read end, which the main thread polls. */
int reaper_watch_fd(void)
{
    return watch_pipe[0];
}

/* A request thread's child that may outlive the request (a workspace's bwrap) is reaped by
 * the main thread when its pidfd turns readable: reap_children cannot take another thread's
 * child, and no SIGCHLD comes again when a zombie passes from an ending thread to us. */
void reaper_watch(pid_t pid)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0 || write(watch_pipe[1], &fd, sizeof fd) != (ssize_t)sizeof fd) {
        log_event("cannot watch child %d for reaping: %s", (int)pid, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
}
