/*
 * files.c - confined file read and write inside a workspace's /workspace.
 *
 * Paths are resolved as the sandbox sees them: openat2 from the holder's root with
 * RESOLVE_IN_ROOT (so an absolute symlink to /workspace/x means what it means inside) and
 * RESOLVE_NO_MAGICLINKS. The object reached must then lie on the /workspace mount (statx mount
 * id): "..", absolute paths elsewhere and symlinks that lead out land on another mount and are
 * refused (path_refused). Nothing inside the sandbox can mount, and nothing can be renamed
 * across mounts, so a descriptor checked to be on /workspace stays there. When the daemon is
 * root the I/O runs with the sandbox user's filesystem uid (setfsuid, per thread), so
 * permissions are the sandbox's and created files and directories belong to it.
 */
#include "files.h"
#include "config.h"
#include "json.h"
#include "layout.h"
#include "registry.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* openat2 of an absolute sandbox path from the sandbox's root (no libc wrapper here). With
 * RESOLVE_IN_ROOT a ".." step fails with EAGAIN when any mount or rename happened on the host
 * meanwhile (every sandbox start mounts), so that is retried, a bounded number of times. */
static int open_in_sandbox(int root, const char *path, int flags, mode_t mode)
{
    struct open_how how = {.flags = (uint64_t)flags, .mode = mode,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = -1;
    for (int attempt = 0; attempt < 1000; attempt++) {
        fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN)
            break;
    }
    return fd;
}

/* Mount id of an open descriptor (0 when unknown). */
static uint64_t mount_id(int fd)
{
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0 || !(stx.stx_mask & STATX_MNT_ID))
        return 0;
    return stx.stx_mnt_id;
}

/* The sandbox's root and the /workspace mount id for one file call. */
struct sandbox_view {
    int root;
    uint64_t workspace_mount;
};

/* Opens the view of a running workspace; workspace_not_running if it is stopping. */
static bool view_open(struct workspace *ws, struct sandbox_view *view, struct api_error *err)
{
    pthread_mutex_lock(&ws->lock);
    view->root = ws->state == WS_RUNNING && ws->root_fd >= 0
                     ? fcntl(ws->root_fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&ws->lock);
    if (view->root < 0) {
        api_error_set(err, 409, "workspace_not_running", "workspace \"%s\" is not running",
                      ws->id);
        return false;
    }
    int top = open_in_sandbox(view->root, "/workspace", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    view->workspace_mount = top >= 0 ? mount_id(top) : 0;
    if (top >= 0)
        close(top);
    if (!view->workspace_mount) {
        close(view->root);
        api_error_set(err, 500, "internal", "cannot resolve /workspace");
        return false;
    }
    return true;
}

/* Opens PATH (absolute, sandbox view) and checks it lies on /workspace; -1 with errno
 * (EXDEV when it resolved elsewhere). */
static int open_confined(struct sandbox_view *view, const char *path, int flags)
{
    int fd = open_in_sandbox(view->root, path, flags, 0);
    if (fd >= 0 && mount_id(fd) != view->workspace_mount) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    return fd;
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

/* Maps a resolution errno to the protocol's error. Permissions and name lengths get codes of
 * their own: they say what is wrong with a file that is inside the workspace. */
static void path_error(int error, const char *path, struct api_error *err)
{
    if (error == ENOENT || error == ENOTDIR)
        api_error_set(err, 404, "file_not_found", "no file \"%s\"", path);
    else if (error == EISDIR)
        api_error_set(err, 400, "is_a_directory", "\"%s\" is a directory", path);
    else if (error == EACCES || error == EPERM)
        api_error_set(err, 403, "permission_denied",
                      "permission denied: the file modes in the workspace do not let the sandbox "
                      "user do this to \"%s\"", path);
    else if (error == ENAMETOOLONG)
        api_error_set(err, 400, "name_too_long",
                      "a name in the path is longer than 255 bytes, or the path longer than 4095");
    else if (error == EDQUOT)
        api_error_from_errno(err, error, "cannot write the file");
    else if (error == EXDEV || error == ELOOP)
        api_error_set(err, 400, "path_refused", "path \"%s\" is refused (%s)", path,
                      error == EXDEV ? "escapes /workspace" : strerror(error));
    else
        api_error_set(err, 500, "internal", "file operation failed on \"%s\": %s", path,
                      strerror(error));
}

/* Turns a protocol path (relative to /workspace or absolute inside it) into an absolute
 * sandbox path (caller frees); NULL (path_refused) for absolute paths elsewhere. */
static char *sandbox_path(const char *path, struct api_error *err)
{
    if (!path || !*path) {
        api_error_set(err, 400, "bad_request", "query parameter \"path\" is required");
        return NULL;
    }
    if (path[0] != '/')
        return xasprintf("/workspace/%s", path);
    if (strncmp(path, "/workspace", 10) == 0 && (path[10] == '\0' || path[10] == '/'))
        return strdup(path);
    api_error_set(err, 400, "path_refused", "path \"%s\" is outside /workspace", path);
    return NULL;
}

/* Reads FD, whose size was SIZE when opened, into a fresh buffer, never more than SIZE + 1
 * bytes: a file that grows or shrinks while read (the sandbox may be writing it) is refused
 * (false) instead of followed, so a read never holds more than the size checked against the
 * limit. */
static bool read_exactly(int fd, size_t size, unsigned char **out, size_t *len)
{
    unsigned char *buf = malloc(size + 1);
    size_t done = 0;
    while (buf && done <= size) {
        ssize_t n = read(fd, buf + done, size + 1 - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (!buf || done != size) {
        free(buf);
        return false;
    }
    *out = buf;
    *len = done;
    return true;
}

/* A file that exists but whose mode forbids reading it (the sandbox's own permissions apply):
 * permission_denied naming the mode, so "mode 0000" is not taken for a missing or refused
 * path. Leaves ERR unset when the file itself cannot be reached (a directory above it). */
static void unreadable_file_error(struct sandbox_view *view, const char *target, const char *path,
                                  struct api_error *err)
{
    struct stat st;
    int fd = open_confined(view, target, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        api_error_set(err, 403, "permission_denied",
                      "permission denied: \"%s\" has mode %04o, which does not let the sandbox "
                      "user read it", path, (unsigned)(st.st_mode & 07777));
    if (fd >= 0)
        close(fd);
}

/* GET files: the file's bytes and mode, confined to the workspace. */
bool files_read(struct workspace *ws, const char *path, struct file_data *out,
                struct api_error *err)
{
    char *target = sandbox_path(path, err);
    struct sandbox_view view;
    struct stat st;
    if (!target || !view_open(ws, &view, err)) {
        free(target);
        return false;
    }
    become_sandbox_fs_user();
    int fd = open_confined(&view, target, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    int error = errno;
    if (fd < 0 && error == EACCES)
        unreadable_file_error(&view, target, path, err);
    restore_fs_user();
    close(view.root);
    free(target);
    if (fd < 0) {
        if (!err->http_status)
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
        ok = read_exactly(fd, (size_t)st.st_size, &out->bytes, &out->len);
        if (!ok)
            api_error_set(err, 409, "file_changed",
                          "\"%s\" changed size while it was read; read it again when it is "
                          "complete", path);
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

/* Opens (creating missing components, mode 0755) the directory holding the last component
 * of TARGET (an absolute sandbox path, modified in place); *NAME points at that component.
 * Every directory reached is checked to lie on /workspace. Returns a directory fd or -1. */
static int open_parent_dir(struct sandbox_view *view, char *target, const char **name)
{
    char *slash = strrchr(target, '/');
    *slash = '\0';
    *name = slash + 1;
    int dir = -1;
    for (char *p = target + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int next = open_confined(view, target, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && dir >= 0) {
            if (mkdirat(dir, strrchr(target, '/') + 1, 0755) != 0 && errno != EEXIST) {
                *p = saved;
                close(dir);
                return -1;
            }
            next = open_confined(view, target, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        *p = saved;
        int error = errno;
        if (dir >= 0)
            close(dir);
        dir = next;
        errno = error;
        if (dir < 0 || saved == '\0')
            return dir;
    }
}

/* Writes DATA to a temporary file in DIR and renames it over NAME (atomic replace). */
static bool write_replace(int dir, const char *name, unsigned mode, const unsigned char *data,
                          size_t len)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, FILES_TEMP_PREFIX "%lx-%lx", (unsigned long)pthread_self(),
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
    char *target = sandbox_path(path, err);
    struct sandbox_view view;
    unsigned mode;
    const char *name;
    struct stat st;
    if (!target || !parse_mode(mode_text, &mode, err)) {
        free(target);
        return NULL;
    }
    if (len > g_config.max_file_bytes) {
        api_error_set(err, 413, "file_too_large", "body is over %zu bytes",
                      g_config.max_file_bytes);
        free(target);
        return NULL;
    }
    size_t l = strlen(target);
    while (l > 1 && target[l - 1] == '/')
        target[--l] = '\0';
    char *shown = strdup(target);
    if (strcmp(target, "/workspace") == 0) {
        api_error_set(err, 400, "is_a_directory", "\"%s\" is a directory", path);
        free(target);
        free(shown);
        return NULL;
    }
    if (!view_open(ws, &view, err)) {
        free(target);
        free(shown);
        return NULL;
    }
    become_sandbox_fs_user();
    int dir = open_parent_dir(&view, target, &name);
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
    close(view.root);
    free(target);
    json_t *resp = NULL;
    if (ok)
        resp = json_pack("{s:s,s:I}", "path", shown, "bytes", (json_int_t)len);
    else
        path_error(error, path, err);
    free(shown);
    return resp;
}
