/*
 * util.c - small helpers shared by several modules: time, formatted allocation, atomic file
 * replacement, recursive removal and directory creation.
 */
#include "sandboxd.h"
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* One directory on the path from the top of a removal down to the current one: its name in
 * its parent and the parent's identity, checked when the walk climbs back through "..". */
struct removal_level {
    char *name;
    dev_t parent_dev;
    ino_t parent_ino;
};

/* Empties directory FD of everything but subdirectories; returns 1 with *SUBDIR (malloc'd)
 * naming the first subdirectory left, 0 when FD is empty, -1 on error (errno set). Entries
 * are never followed: symlinks are unlinked like files. */
static int remove_files_in(int fd, char **subdir)
{
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    struct dirent *e;
    int result = 0;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return -1;
    }
    *subdir = NULL;
    while (result == 0 && (e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN)
            is_dir = fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        if (is_dir) {
            *subdir = strdup(e->d_name);
            result = 1;
        } else if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT) {
            result = -1;
        }
    }
    int saved = errno;
    closedir(d);
    errno = saved;
    return result;
}

/* Opens subdirectory NAME of FD for removal without following a symlink and without
 * crossing into another filesystem (a mount point is never emptied: its content is not
 * ours). A directory its owner made unreadable (mode 0) is given back owner rights first. */
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

/* rm -rf of a directory the daemon created, at any depth: an openat/unlinkat walk that holds
 * one descriptor at a time (a tree deeper than PATH_MAX or than the descriptor limit is no
 * obstacle), never follows symlinks, never crosses a mount point, and climbs back through
 * ".." only after checking it reached the parent it came from. False with errno when
 * something could not be removed. */
bool remove_tree(const char *path)
{
    struct stat top;
    if (lstat(path, &top) != 0)
        return errno == ENOENT;
    if (!S_ISDIR(top.st_mode))
        return unlink(path) == 0 || errno == ENOENT;
    if ((top.st_mode & 0700) != 0700)
        chmod(path, 0700);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct removal_level *levels = NULL;
    size_t depth = 0, cap = 0;
    bool ok = fd >= 0;
    while (ok) {
        char *sub;
        struct stat here;
        int r = remove_files_in(fd, &sub);
        ok = r >= 0 && fstat(fd, &here) == 0;
        if (ok && r == 1) {   /* descend */
            int child = open_subdir_for_removal(fd, sub, top.st_dev);
            ok = child >= 0;
            if (ok && depth == cap) {
                cap = cap ? cap * 2 : 64;
                levels = realloc(levels, cap * sizeof *levels);
            }
            if (ok) {
                levels[depth++] = (struct removal_level){sub, here.st_dev, here.st_ino};
                close(fd);
                fd = child;
            } else {
                free(sub);
            }
        } else if (ok && depth > 0) {   /* empty: climb and remove it */
            struct removal_level *level = &levels[--depth];
            int parent = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            struct stat st;
            ok = parent >= 0 && fstat(parent, &st) == 0 && st.st_dev == level->parent_dev &&
                 st.st_ino == level->parent_ino;
            if (!ok && parent >= 0)
                errno = ESTALE;   /* moved under us: stop rather than guess */
            close(fd);
            fd = parent;
            ok = ok && (unlinkat(fd, level->name, AT_REMOVEDIR) == 0 || errno == ENOENT);
            free(level->name);
        } else if (ok) {
            break;
        }
    }
    int saved = errno;
    if (fd >= 0)
        close(fd);
    while (depth > 0)
        free(levels[--depth].name);
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
