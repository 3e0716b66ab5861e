/*
 * util.c - small helpers shared by several modules: time, formatted allocation, atomic file
 * replacement, recursive removal and directory creation.
 */
#include "sandboxd.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Milliseconds on the monotonic clock, for wall times and deadlines. */
double monotonic_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The CLOCK_REALTIME instant MS milliseconds from now, for pthread_cond_timedwait. */
struct timespec realtime_in_ms(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    return t;
}

/* asprintf that aborts on allocation failure, so callers need no error path for paths. */
char *xasprintf(const char *fmt, ...)
{
    char *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&out, fmt, ap) < 0)
        abort();
    va_end(ap);
    return out;
}

/* Runs FN(ARG) in a child process that borrows the daemon's memory until it execs or exits
 * (CLONE_VM | CLONE_VFORK: this thread waits that long). FN may only make system calls, and
 * raw ones for credentials: glibc's setresuid would signal every thread of the daemon.
 * Returns the child's pid (reap it with waitpid) or -1. */
pid_t spawn_borrowing(int (*fn)(void *), void *arg)
{
    const size_t size = 64 * 1024;
    char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                       -1, 0);
    if (stack == MAP_FAILED)
        return -1;
    pid_t pid = clone(fn, stack + size, HELPER_CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
    munmap(stack, size);
    return pid;
}

/* Replaces PATH with DATA through a temporary file, fsync and rename, so a crash leaves either
 * the old or the new content (workspace state must survive SIGKILL). */
bool write_file_atomic(const char *path, const char *data, size_t len, mode_t mode)
{
    char *tmp = xasprintf("%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    bool ok = fd >= 0;
    size_t done = 0;

    while (ok && done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        if (ok)
            done += (size_t)n;
    }
    if (fd >= 0) {
        ok = ok && fsync(fd) == 0;
        close(fd);
    }
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    free(tmp);
    return ok;
}

/* nftw callback: removes one entry (depth first, never following symlinks). */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP || type == FTW_D)
        return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* rm -rf without following symlinks; used only on directories the daemon created. */
bool remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT;
    return nftw(path, remove_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0;
}

/* mkdir -p with MODE for every created component. */
bool mkdir_p(const char *path, mode_t mode)
{
    char *copy = strdup(path);
    bool ok = true;
    for (char *p = copy + 1; ok && *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        ok = mkdir(copy, mode) == 0 || errno == EEXIST;
        *p = '/';
    }
    ok = ok && (mkdir(copy, mode) == 0 || errno == EEXIST);
    free(copy);
    return ok;
}
