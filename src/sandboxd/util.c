/*
 * util.c - small helpers shared by several modules: time, formatted allocation, atomic file
 * replacement, recursive removal and directory creation.
 */
#include "util.h"
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* In a helper child: switches to the sandbox user when the daemon is root (raw system calls:
 * glibc's wrappers would broadcast to the daemon's threads). */
CHILD_ENTRY bool become_sandbox_user(void)
{
    return !g_config.is_root ||
           (syscall(SYS_setgroups, 0, NULL) == 0 &&
            syscall(SYS_setresgid, g_config.sandbox_gid, g_config.sandbox_gid,
                    g_config.sandbox_gid) == 0 &&
            syscall(SYS_setresuid, g_config.sandbox_uid, g_config.sandbox_uid,
                    g_config.sandbox_uid) == 0);
}

/* In a helper child: writes TEXT to the kernel file PATH (/proc/self/uid_map of a fresh user
 * namespace, a sysctl of a joined one). */
CHILD_ENTRY bool write_proc_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Replaces PATH with DATA through a temporary file and a rename, so a crash of any process
 * leaves either the old or the new content (workspace state must survive SIGKILL); with SYNC
 * the data is on disk before the rename, so a crash of the host does too. */
bool write_file_atomic(const char *path, const char *data, size_t len, mode_t mode, bool sync)
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
        ok = ok && (!sync || fsync(fd) == 0);
        close(fd);
    }
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    free(tmp);
    return ok;
}

#define REMOVAL_OPEN_LEVELS 32   /* directory streams a removal keeps open at once */

/* One directory on the path from the top of a removal down to the current one. Only the
 * deepest REMOVAL_OPEN_LEVELS keep their stream open (a tree deeper than the descriptor limit
 * must not need one descriptor per level); a closed level is reopened through ".." from its
 * child, checked by identity, and read on from where it was (the filesystem's directory
 * offsets; an entry a filesystem moves is found by the final look from the start). */
struct removal_level {
    char *name;          /* in its parent; NULL for the top */
    dev_t dev;
    ino_t ino;
    DIR *dir;            /* NULL while closed */
    long pos;            /* telldir() when it was closed */
    bool recheck_done;   /* scanned once more from the start since the last removal */
};

/* Opens subdirectory NAME of FD for removal without following a symlink and without
 * crossing into another filesystem (a mount point is never emptied: its content is not
 * ours). A directory its owner made unreadable (mode 0) or read-only gets owner rights. */
static int open_subdir_for_removal(int fd, const char *name, dev_t dev)
{
    int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int child = openat(fd, name, flags);
    if (child < 0 && errno == EACCES && fchmodat(fd, name, 0700, 0) == 0)
        child = openat(fd, name, flags);
    struct stat st;
    if (child >= 0 && (fstat(child, &st) != 0 || st.st_dev != dev)) {
        close(child);
        errno = EBUSY;
        return -1;
    }
    if (child >= 0 && (st.st_mode & 0700) != 0700)
        fchmod(child, 0700);   /* entries of a read-only directory can be unlinked then */
    return child;
}

/* Pushes directory FD (named NAME in the current level) as the new deepest level, closing
 * the stream of the shallowest open level when too many are open. False with errno. */
static bool removal_push(struct removal_level **levels, size_t *depth, size_t *cap,
                         size_t *open_levels, int fd, const char *name)
{
    struct stat st;
    DIR *dir = fstat(fd, &st) == 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        close(fd);
        return false;
    }
    if (*depth == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *levels = realloc(*levels, *cap * sizeof **levels);
    }
    if (*open_levels >= REMOVAL_OPEN_LEVELS) {
        struct removal_level *oldest = &(*levels)[*depth - *open_levels];
        oldest->pos = telldir(oldest->dir);
        closedir(oldest->dir);
        oldest->dir = NULL;
        (*open_levels)--;
    }
    (*levels)[(*depth)++] = (struct removal_level){name ? strdup(name) : NULL, st.st_dev,
                                                   st.st_ino, dir, 0, false};
    (*open_levels)++;
    return true;
}

/* Leaves the deepest level, which is empty: makes sure its parent's stream is open (through
 * "..", which must lead back to the parent it came from), then removes it. False with errno. */
static bool removal_pop(struct removal_level *levels, size_t *depth, size_t *open_levels)
{
    struct removal_level *child = &levels[*depth - 1], *parent = &levels[*depth - 2];
    bool ok = true;
    if (!parent->dir) {
        int fd = openat(dirfd(child->dir), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == parent->dev &&
             st.st_ino == parent->ino && (parent->dir = fdopendir(fd)) != NULL;
        if (!ok && fd >= 0) {
            close(fd);
            errno = ESTALE;   /* moved under us: stop rather than guess */
        }
        if (ok) {
            (*open_levels)++;
            seekdir(parent->dir, parent->pos);
        }
    }
    closedir(child->dir);
    (*open_levels)--;
    ok = ok && (unlinkat(dirfd(parent->dir), child->name, AT_REMOVEDIR) == 0 || errno == ENOENT);
    free(child->name);
    (*depth)--;
    return ok;
}

/* Removes entry E of the deepest level: files and symlinks are unlinked, empty directories
 * removed; *DESCEND is set for a directory that has content. False with errno. */
static bool remove_entry(struct removal_level *level, struct dirent *e, bool *descend)
{
    int fd = dirfd(level->dir);
    struct stat st;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN)
        is_dir = fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    *descend = false;
    if (!is_dir)
        return unlinkat(fd, e->d_name, 0) == 0 || errno == ENOENT;
    if (unlinkat(fd, e->d_name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return true;
    *descend = true;
    return true;
}

/* rm -rf of a directory the daemon created, at any depth and width: an openat/unlinkat walk
 * (a tree deeper than PATH_MAX or than the descriptor limit is no obstacle) that never
 * follows symlinks, never crosses a mount point, and climbs back through ".." only after
 * checking it reached the parent it came from; linear in the tree's size. False with errno
 * when something could not be removed. */
bool remove_tree(const char *path)
{
    struct stat top;
    if (lstat(path, &top) != 0)
        return errno == ENOENT;
    if (!S_ISDIR(top.st_mode))
        return unlink(path) == 0 || errno == ENOENT;
    if ((top.st_mode & 0700) != 0700)
        chmod(path, 0700);
    struct removal_level *levels = NULL;
    size_t depth = 0, cap = 0, open_levels = 0;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = fd >= 0 && removal_push(&levels, &depth, &cap, &open_levels, fd, NULL);
    while (ok) {
        struct removal_level *level = &levels[depth - 1];
        struct dirent *e;
        errno = 0;
        while ((e = readdir(level->dir)) &&
               (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0))
            ;
        bool descend = false;
        if (e) {
            level->recheck_done = false;
            ok = remove_entry(level, e, &descend);
            if (ok && descend) {
                int child = open_subdir_for_removal(dirfd(level->dir), e->d_name, top.st_dev);
                ok = (child >= 0 || errno == ENOENT) &&
                     (child < 0 || removal_push(&levels, &depth, &cap, &open_levels, child,
                                                e->d_name));
            }
        } else if (errno != 0) {
            ok = false;
        } else if (!level->recheck_done) {   /* an entry a removal moved past: look again */
            rewinddir(level->dir);
            level->recheck_done = true;
        } else if (depth > 1) {
            ok = removal_pop(levels, &depth, &open_levels);
        } else {
            break;
        }
    }
    int saved = errno;
    while (depth > 0) {
        if (levels[depth - 1].dir)
            closedir(levels[depth - 1].dir);
        free(levels[--depth].name);
    }
    free(levels);
    if (!ok) {
        errno = saved;
        return false;
    }
    return rmdir(path) == 0 || errno == ENOENT;
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

/* Closes a descriptor if open and marks it closed. */
/*
 * The passwd entry of NAME (or, NAME NULL, of UID) into *PW, its strings in BUF: the _r forms,
 * since getpwnam's and getpwuid's static result is shared by every thread. False when none.
 */
bool user_lookup(const char *name, uid_t uid, struct passwd *pw, char *buf, size_t len)
{
    struct passwd *found = NULL;
    if (name)
        getpwnam_r(name, pw, buf, len, &found);
    else
        getpwuid_r(uid, pw, buf, len, &found);
    return found != NULL;
}

void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}
