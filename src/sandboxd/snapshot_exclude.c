/*
 * snapshot_exclude.c - what a capture leaves out of a snapshot, so that no run started from it
 * inherits another run's credentials or the project's private files.
 *
 * Always left out: /workspace/.mesh (the run token /workspace/.mesh/run-token the extension
 * delivers, and whatever else it may put there), and the temporary files of the file call's
 * atomic writes (FILES_TEMP_PREFIX*, anywhere: a write in flight, a token's included).
 *
 * Then the project's own list, /workspace/.meshignore, a subset of gitignore read once per
 * capture: one pattern a line; blank lines and lines starting with '#' are skipped; trailing
 * spaces and a '\r' are dropped; a trailing '/' matches directories only; a pattern with a '/'
 * at its start or in its middle is anchored at /workspace, one without matches a name at any
 * depth; '*' matches any characters but '/', '?' one, '\' makes the next character literal;
 * a '**' component matches any number of directories. Not supported, and refused ('!'
 * negation) or literal ('[' classes). A pattern only ever excludes: it is matched against the
 * paths the capture walks inside /workspace, so '..' or an absolute host path names nothing.
 *
 * The list is the workspace's own, so it is read as hostile input: opened without following a
 * symlink and without blocking, taken only when it is a regular file of at most
 * MESHIGNORE_MAX_BYTES with at most MESHIGNORE_MAX_PATTERNS patterns; anything else refuses the
 * capture (422 meshignore_invalid) rather than capture what the project meant to leave out.
 * Matching is a linear-space, O(pattern x name) greedy match, never exponential.
 */
#include "snapshot_exclude.h"
#include "json.h"
#include "layout.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MESHIGNORE_NAME ".meshignore"
#define MESH_DIR_NAME ".mesh"

/* One parsed pattern: its text (no leading or trailing '/'), how it is matched. */
struct exclude_pattern {
    char *text;
    bool anchored;   /* matched against the path from /workspace, else against the name */
    bool dir_only;   /* written with a trailing '/' */
};

/* Matches one path component NAME (no '/') against component pattern PAT of PAT_LEN bytes:
 * '*' any run of characters, '?' one, '\x' the character x. Greedy with one back-track point
 * (the last '*'), so O(len(PAT) x len(NAME)). */
static bool component_match(const char *pat, size_t pat_len, const char *name, size_t name_len)
{
    size_t p = 0, n = 0, star_p = (size_t)-1, star_n = 0;
    while (n < name_len) {
        if (p < pat_len && pat[p] == '*') {
            star_p = ++p;
            star_n = n;
            continue;
        }
        if (p < pat_len) {
            bool escaped = pat[p] == '\\' && p + 1 < pat_len;
            char want = escaped ? pat[p + 1] : pat[p];
            if ((!escaped && want == '?') || want == name[n]) {
                p += escaped ? 2 : 1;
                n++;
                continue;
            }
        }
        if (star_p == (size_t)-1)
            return false;
        p = star_p;          /* let the last '*' take one more character */
        n = ++star_n;
    }
    while (p < pat_len && pat[p] == '*')
        p++;
    return p == pat_len;
}

/* Length of the component that starts at S (up to '/' or the end). */
static size_t component_len(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash ? (size_t)(slash - s) : strlen(s);
}

/* The component after the one at S, or NULL when S is the last. */
static const char *component_next(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash ? slash + 1 : NULL;
}

/* Whether the component at S is "**". */
static bool component_is_globstar(const char *s)
{
    return s && component_len(s) == 2 && s[0] == '*' && s[1] == '*';
}

/* Matches relative path PATH ("a/b/c") against anchored pattern PAT component by component; a
 * "**" component takes any number of path components. The same greedy scheme as
 * component_match, one level up: every other component matches exactly one path component. */
static bool path_match(const char *pat, const char *path)
{
    const char *p = pat, *n = path, *star_p = NULL, *star_n = NULL;
    while (n) {
        if (component_is_globstar(p)) {
            star_p = p = component_next(p);
            star_n = n;
            if (!p)
                return true;   /* a trailing "**" takes the rest */
            continue;
        }
        if (p && component_match(p, component_len(p), n, component_len(n))) {
            p = component_next(p);
            n = component_next(n);
            continue;
        }
        if (!star_p || !(star_n = component_next(star_n)))
            return false;
        p = star_p;            /* the last "**" takes one more component */
        n = star_n;
    }
    while (component_is_globstar(p))
        p = component_next(p);
    return p == NULL;
}

/* Whether pattern PAT excludes the entry at PATH (relative to /workspace), named NAME. */
static bool pattern_excludes(const struct exclude_pattern *pat, const char *path,
                             const char *name, bool is_dir)
{
    if (pat->dir_only && !is_dir)
        return false;
    return pat->anchored ? path_match(pat->text, path)
                         : component_match(pat->text, strlen(pat->text), name, strlen(name));
}

/*
 * Whether the capture leaves out the entry at PATH (relative to /workspace: "a/b"), named NAME,
 * a directory when IS_DIR (lstat: a symlink to one is not). A directory left out is left out
 * with everything under it.
 */
bool capture_excludes(const struct capture_exclusions *ex, const char *path, const char *name,
                      bool is_dir)
{
    if (strcmp(path, MESH_DIR_NAME) == 0 ||
        strncmp(name, FILES_TEMP_PREFIX, strlen(FILES_TEMP_PREFIX)) == 0)
        return true;
    for (int i = 0; i < ex->count; i++)
        if (pattern_excludes(&ex->patterns[i], path, name, is_dir))
            return true;
    return false;
}

/* Drops trailing spaces (not a '\'-escaped one) and a '\r' from LINE, in place. */
static void line_trim(char *line)
{
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t') &&
           !(len > 1 && line[len - 2] == '\\'))
        line[--len] = '\0';
}

/* Parses one line (trimmed) into EX; false with ERR for what is not supported. */
static bool pattern_add(struct capture_exclusions *ex, char *line, int line_no,
                        struct api_error *err)
{
    if (line[0] == '\0' || line[0] == '#')
        return true;
    if (line[0] == '!') {
        api_error_set(err, 422, "meshignore_invalid",
                      "/workspace/" MESHIGNORE_NAME " line %d: '!' (re-including) is not "
                      "supported; a pattern can only exclude", line_no);
        return false;
    }
    if (ex->count >= MESHIGNORE_MAX_PATTERNS) {
        api_error_set(err, 422, "meshignore_invalid",
                      "/workspace/" MESHIGNORE_NAME " has more than %d patterns",
                      MESHIGNORE_MAX_PATTERNS);
        return false;
    }
    struct exclude_pattern *pat = &ex->patterns[ex->count];
    size_t len = strlen(line);
    pat->dir_only = line[len - 1] == '/';
    while (len > 0 && line[len - 1] == '/')
        line[--len] = '\0';
    char *text = line;
    pat->anchored = text[0] == '/' || strchr(text, '/') != NULL;
    while (text[0] == '/')
        text++;
    if (text[0] == '\0')
        return true;   /* "/" alone names /workspace itself, which is never left out */
    pat->text = text;
    ex->count++;
    return true;
}

/* Reads at most MESHIGNORE_MAX_BYTES of the open list FD into a new NUL-terminated buffer;
 * NULL with ERR when it is larger or unreadable. */
static char *list_read(int fd, struct api_error *err)
{
    char *text = malloc(MESHIGNORE_MAX_BYTES + 2);
    size_t len = 0;
    ssize_t n = 0;
    if (!text) {
        api_error_from_errno(err, ENOMEM, "cannot read /workspace/" MESHIGNORE_NAME);
        return NULL;
    }
    /* one byte more than allowed tells a file that grew past the bound since fstat */
    while (len <= MESHIGNORE_MAX_BYTES &&
           ((n = read(fd, text + len, MESHIGNORE_MAX_BYTES + 1 - len)) > 0 ||
            (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    if (n < 0 || len > MESHIGNORE_MAX_BYTES || memchr(text, '\0', len)) {
        if (n < 0 || memchr(text, '\0', len))
            api_error_set(err, 422, "meshignore_invalid", "/workspace/" MESHIGNORE_NAME " %s",
                          n < 0 ? "cannot be read" : "holds a NUL byte");
        else
            api_error_set(err, 422, "meshignore_invalid", "/workspace/" MESHIGNORE_NAME
                          " is larger than %d bytes", MESHIGNORE_MAX_BYTES);
        free(text);
        return NULL;
    }
    text[len] = '\0';
    return text;
}

/* Opens the list in WORKSPACE (a directory descriptor of /workspace) as a regular file, never
 * following a symlink nor waiting on a FIFO; -1 with errno ENOENT when there is none, -1 with
 * ERR when it is something else. */
static int list_open(int workspace, struct api_error *err)
{
    struct stat st;
    int fd = openat(workspace, MESHIGNORE_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                                                O_NOCTTY);
    if (fd < 0 && errno == ENOENT)
        return -1;
    int error = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : 0;
    if (error == 0 && S_ISREG(st.st_mode) && st.st_size <= MESHIGNORE_MAX_BYTES)
        return fd;
    if (fd >= 0)
        close(fd);
    if (error == 0 && S_ISREG(st.st_mode))
        api_error_set(err, 422, "meshignore_invalid", "/workspace/" MESHIGNORE_NAME
                      " is larger than %d bytes", MESHIGNORE_MAX_BYTES);
    else
        api_error_set(err, 422, "meshignore_invalid", "/workspace/" MESHIGNORE_NAME " %s",
                      error == ELOOP ? "is a symlink; it must be a regular file"
                      : error != 0   ? "cannot be opened" : "is not a regular file");
    errno = EINVAL;
    return -1;
}

/* Parses list TEXT (NUL-terminated, at most MESHIGNORE_MAX_BYTES; EX takes it over) into EX;
 * false with ERR for a line that is not supported or too many patterns. */
bool capture_exclusions_parse(char *text, struct capture_exclusions *ex, struct api_error *err)
{
    memset(ex, 0, sizeof *ex);
    ex->text = text;
    ex->patterns = calloc(MESHIGNORE_MAX_PATTERNS, sizeof *ex->patterns);
    if (!ex->patterns) {
        api_error_from_errno(err, ENOMEM, "cannot read /workspace/" MESHIGNORE_NAME);
        capture_exclusions_free(ex);
        return false;
    }
    char *line = ex->text;
    for (int line_no = 1; line; line_no++) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        line_trim(line);
        if (!pattern_add(ex, line, line_no, err)) {
            capture_exclusions_free(ex);
            return false;
        }
        line = end ? end + 1 : NULL;
    }
    return true;
}

/*
 * Loads /workspace/.meshignore from WORKSPACE (a directory descriptor of /workspace) into EX.
 * No list is no pattern; a list that cannot be taken as it is refuses the capture (false,
 * ERR): the project meant to leave something out.
 */
bool capture_exclusions_load(int workspace, struct capture_exclusions *ex, struct api_error *err)
{
    memset(ex, 0, sizeof *ex);
    int fd = list_open(workspace, err);
    if (fd < 0)
        return errno == ENOENT;
    char *text = list_read(fd, err);
    close(fd);
    return text && capture_exclusions_parse(text, ex, err);
}

/* Frees what capture_exclusions_load made. */
void capture_exclusions_free(struct capture_exclusions *ex)
{
    free(ex->patterns);
    free(ex->text);
    memset(ex, 0, sizeof *ex);
}
