/*
 * files.c - confined file read and write inside a workspace's /workspace.
 *
 * Every path is resolved by the kernel under the workspace directory with openat2
 * RESOLVE_BENEATH: "..", absolute symlinks and symlinks that climb out are refused
 * (path_refused) at any component, without a check-then-use race. When the daemon is root the
 * I/O runs with the sandbox user's filesystem uid (setfsuid, per thread), so permissions are
 * the sandbox's and created files and directories belong to the sandbox user.
 */
#include "sandboxd.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* openat2 restricted to DIRFD's subtree (no libc wrapper in this glibc). */
static int open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {.flags = (uint64_t)flags, .mode = mode,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* Switches this thread's filesystem identity to the sandbox user (root daemon only). */
static void become_sandbox_fs_user(void)
{
    if (g_config.is_root) {
        syscall(SYS_setfsgid, g_config.sandbox_gid);
        syscall(SYS_setfsuid, g_config.sandbox_uid);
    }
}

/* Restores the daemon's own filesystem identity on this thread. */
static void restore_fs_user(void)
{
    if (g_config.is_root) {
        syscall(SYS_setfsuid, 0);
        syscall(SYS_setfsgid, 0);
    }
}

/* Maps a resolution errno to the protocol's error. */
static void path_error(int error, const char *path, struct api_error *err)
{
    if (error == ENOENT || error == ENOTDIR)
        api_error_set(err, 404, "file_not_found", "no file \"%s\"", path);
    else if (error == EISDIR)
        api_error_set(err, 400, "is_a_directory", "\"%s\" is a directory", path);
    else if (error == EXDEV || error == ELOOP || error == EACCES || error == EPERM)
        api_error_set(err, 400, "path_refused", "path \"%s\" is refused (%s)", path,
                      error == EXDEV ? "escapes /workspace" : strerror(error));
    else
        api_error_set(err, 500, "internal", "file operation failed on \"%s\": %s", path,
                      strerror(error));
}

/* Turns a protocol path (relative to /workspace or absolute inside it) into a relative one;
 * NULL (path_refused) for absolute paths elsewhere. */
static const char *relative_path(const char *path, struct api_error *err)
{
    if (!path || !*path) {
        api_error_set(err, 400, "bad_request", "query parameter \"path\" is required");
        return NULL;
    }
    if (path[0] != '/')
        return path;
    if (strncmp(path, "/workspace", 10) == 0 && (path[10] == '\0' || path[10] == '/'))
        return path[10] ? path + 11 : ".";
    api_error_set(err, 400, "path_refused", "path \"%s\" is outside /workspace", path);
    return NULL;
}

/* Opens the workspace's /workspace directory on the host. */
static int open_workspace_root(struct workspace *ws, struct api_error *err)
{
    char *dir = workspace_files_dir(ws->id);
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        api_error_set(err, 500, "internal", "workspace directory missing");
    return fd;
}

/* Reads all of FD (size known from fstat) into a fresh buffer. */
static bool read_all(int fd, size_t size, unsigned char **out, size_t *len)
{
    unsigned char *buf = malloc(size + 1);
    size_t done = 0;
    for (;;) {
        ssize_t n = read(fd, buf + done, size + 1 - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
        if (done > size) { /* grew while reading: read the rest */
            size *= 2;
            buf = realloc(buf, size + 1);
        }
    }
    *out = buf;
    *len = done;
    return true;
}

/* GET files: the file's bytes and mode, confined to the workspace. */
bool files_read(struct workspace *ws, const char *path, struct file_data *out,
                struct api_error *err)
{
    const char *rel = relative_path(path, err);
    struct stat st;
    if (!rel)
        return false;
    int root = open_workspace_root(ws, err);
    if (root < 0)
        return false;
    become_sandbox_fs_user();
    int fd = open_beneath(root, rel, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0);
    int error = errno;
    restore_fs_user();
    close(root);
    if (fd < 0) {
        path_error(error, path, err);
        return false;
    }
    bool ok = fstat(fd, &st) == 0;
    if (ok && S_ISDIR(st.st_mode)) {
        api_error_set(err, 400, "is_a_directory", "\"%s\" is a directory", path);
        ok = false;
    } else if (ok && !S_ISREG(st.st_mode)) {
        api_error_set(err, 400, "path_refused", "\"%s\" is not a regular file", path);
        ok = false;
    } else if (ok && (size_t)st.st_size > g_config.max_file_bytes) {
        api_error_set(err, 413, "file_too_large", "\"%s\" is over %zu bytes", path,
                      g_config.max_file_bytes);
        ok = false;
    }
    if (ok) {
        out->mode = st.st_mode & 07777;
        read_all(fd, (size_t)st.st_size, &out->bytes, &out->len);
        if (out->len > g_config.max_file_bytes) {
            free(out->bytes);
            api_error_set(err, 413, "file_too_large", "\"%s\" is over %zu bytes", path,
                          g_config.max_file_bytes);
            ok = false;
        }
    }
    close(fd);
    return ok;
}

/* Parses the decimal mode query parameter (default 420 = 0644). */
static bool parse_mode(const char *text, unsigned *mode, struct api_error *err)
{
    char *end;
    unsigned long v = text ? strtoul(text, &end, 10) : 420;
    if (text && (!*text || *end || v > 0777)) {
        api_error_set(err, 400, "bad_request", "query parameter \"mode\" must be decimal <= 511");
        return false;
    }
    *mode = (unsigned)v;
    return true;
}

/* Opens (creating missing components, mode 0755) the directory holding REL's last component;
 * *NAME points at that component. Returns a directory fd or -1 with errno. */
static int open_parent_dir(int root, char *rel, const char **name)
{
    char *slash = strrchr(rel, '/');
    if (!slash) {
        *name = rel;
        return open_beneath(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    }
    *slash = '\0';
    *name = slash + 1;
    int dir = -1;
    for (char *p = rel;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int next = open_beneath(root, rel, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (next < 0 && errno == ENOENT) {
            const char *comp = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
            int base = dir >= 0 ? dir : root;
            if (mkdirat(base, comp, 0755) != 0 && errno != EEXIST) {
                *p = saved;
                if (dir >= 0)
                    close(dir);
                return -1;
            }
            next = open_beneath(root, rel, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        }
        *p = saved;
        if (dir >= 0)
            close(dir);
        dir = next;
        if (dir < 0 || saved == '\0')
            return dir;
    }
}

/* Writes DATA to a temporary file in DIR and renames it over NAME (atomic replace). */
static bool write_replace(int dir, const char *name, unsigned mode, const unsigned char *data,
                          size_t len)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".mesh-write-%lx-%lx", (unsigned long)pthread_self(),
             (unsigned long)(monotonic_ms() * 1000));
    int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return false;
    size_t done = 0;
    bool ok = true;
    while (ok && done < len) {
        ssize_t n = write(fd, data + done, len - done);
        ok = n > 0 || (n < 0 && errno == EINTR);
        if (n > 0)
            done += (size_t)n;
    }
    ok = ok && fchmod(fd, mode) == 0;
    int saved = errno;
    close(fd);
    ok = ok && renameat(dir, tmp, dir, name) == 0;
    if (!ok) {
        saved = errno;
        unlinkat(dir, tmp, 0);
        errno = saved;
    }
    return ok;
}

/* PUT files: confined, atomic write of the request body with parent creation. */
json_t *files_write(struct workspace *ws, const char *path, const char *mode_text,
                    const unsigned char *data, size_t len, struct api_error *err)
{
    const char *rel = relative_path(path, err);
    unsigned mode;
    const char *name;
    struct stat st;
    if (!rel || !parse_mode(mode_text, &mode, err))
        return NULL;
    if (len > g_config.max_file_bytes) {
        api_error_set(err, 413, "file_too_large", "body is over %zu bytes",
                      g_config.max_file_bytes);
        return NULL;
    }
    char *copy = strdup(rel);
    size_t l = strlen(copy);
    while (l > 1 && copy[l - 1] == '/')
        copy[--l] = '\0';
    int root = open_workspace_root(ws, err);
    if (root < 0) {
        free(copy);
        return NULL;
    }
    become_sandbox_fs_user();
    int dir = open_parent_dir(root, copy, &name);
    bool ok = dir >= 0;
    int error = errno;
    if (ok && (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
               (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)))) {
        ok = false;
        error = EISDIR;
    }
    if (ok) {
        ok = write_replace(dir, name, mode, data, len);
        error = errno;
    }
    restore_fs_user();
    if (dir >= 0)
        close(dir);
    close(root);
    free(copy);
    if (!ok) {
        path_error(error, path, err);
        return NULL;
    }
    char *shown = strcmp(rel, ".") == 0 ? strdup("/workspace") : xasprintf("/workspace/%s", rel);
    json_t *resp = json_pack("{s:s,s:I}", "path", shown, "bytes", (json_int_t)len);
    free(shown);
    return resp;
}
