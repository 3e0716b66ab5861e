/*
 * fuzz_requests.c - libFuzzer target for what request handlers validate before they touch a
 * workspace: exec bodies (exec_request.c), acquire bodies (workspace.c), snapshot capture bodies and
 * snapshot list filters (snapshot.c), file paths and modes (files.c), label filters and
 * workspace ids, and the capture of a command's output in pieces of any size (capture.c: the
 * kept tail must be exactly the stream's last bytes), and a /workspace/.meshignore with the
 * paths it is matched against (snapshot_exclude.c). The first byte picks the parser, the rest
 * is the untrusted input. The daemon's sources are included to reach their static parsers;
 * the rest of the daemon is linked as is (no main.c).
 */
#include "exec_request.h"
#include "../../src/sandboxd/capture.c"
#include "../../src/sandboxd/files.c"
#include "../../src/sandboxd/workspace.c"
#include "../../src/sandboxd/snapshot.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A workspace object that exists only for the parsers (never started). */
static struct workspace *fuzz_workspace(bool open_network)
{
    static struct workspace *ws[2];
    if (!ws[open_network]) {
        ws[open_network] = workspace_new("fuzz");
        snprintf(ws[open_network]->network, sizeof ws[open_network]->network, "%s",
                 open_network ? "open" : "none");
    }
    return ws[open_network];
}

/* An exec body: validation and the environment it would build. */
static void fuzz_exec_body(json_t *body, bool open_network)
{
    struct exec_request req;
    struct api_error err = {0};
    if (!exec_parse(fuzz_workspace(open_network), body, &req, &err) && !err.code)
        abort();   /* every refusal names its error */
    exec_request_free(&req);
}

/* An acquire body: size, labels, network and allowlist. */
static void fuzz_acquire_body(json_t *body)
{
    struct ws_settings settings;
    struct api_error err = {0};
    if (!parse_acquire_body(body, &settings.tier, &settings.labels, &settings.snapshot, &err) ||
        !parse_network(body, &settings.network, &settings.allow, &err)) {
        if (!err.code)
            abort();
        return;
    }
    struct workspace *ws = workspace_new_with("fuzz", &settings);
    json_decref(settings.allow);
    if (ws) {
        json_decref(workspace_describe(ws));
        workspace_free(ws);
    }
}

/* A snapshot capture body: workspace and labels. */
static void fuzz_capture_body(json_t *body)
{
    const char *workspace;
    json_t *labels;
    struct api_error err = {0};
    if (!parse_capture_body(body, &workspace, &labels, &err) && !err.code)
        abort();
    if (err.code == NULL && (!workspace || (labels && !json_is_object(labels))))
        abort();   /* an accepted body names a workspace; labels are an object */
}

/* A file path and a mode (after the first NUL), as the query string gives them. */
static void fuzz_path(const uint8_t *data, size_t size)
{
    struct api_error err = {0};
    char *path = strndup((const char *)data, size);
    const uint8_t *nul = memchr(data, 0, size);
    char *mode_text = nul ? strndup((const char *)nul + 1, size - (size_t)(nul + 1 - data)) : NULL;
    char *target = sandbox_path(path, &err);
    if (target && strncmp(target, "/workspace", 10) != 0)
        abort();   /* every accepted path is under /workspace before resolution */
    unsigned mode;
    if (parse_mode(mode_text, &mode, &err) && mode > 0777)
        abort();
    free(target);
    free(path);
    free(mode_text);
}

/*
 * Output capture: byte 0 the budget (1-256), byte 1 the mode (odd: tail only), then pieces,
 * each a length byte and that many bytes of output. The tail-only result (raw, as output
 * "tail" answers) must be the stream's last bytes exactly, its length in stdout_kept; head
 * and tail (base64) must hold both ends.
 */
static void fuzz_capture(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    size_t limit = (size_t)data[0] + 1;
    bool tail_only = data[1] & 1;
    struct capture cap;
    capture_init(&cap, limit, tail_only);
    unsigned char *stream = malloc(size + 1);
    size_t stream_len = 0;
    for (size_t i = 2; i < size;) {
        size_t n = data[i++];
        if (n > size - i)
            n = size - i;
        capture_append(&cap, data + i, n);
        memcpy(stream + stream_len, data + i, n);
        stream_len += n;
        i += n;
    }
    if (cap.total != stream_len)
        abort();
    bool truncated = false;
    if (tail_only) {
        /* as an exec answers output "tail": raw bytes, stdout then (here empty) stderr */
        struct capture none;
        struct exec_output raw = {0};
        json_t *resp = json_object();
        capture_init(&none, limit, true);
        size_t want = stream_len < limit ? stream_len : limit;
        if (!capture_finish_raw(&cap, &none, resp, &raw, &truncated) ||
            truncated != (stream_len > limit) || raw.len != want ||
            json_integer_value(json_object_get(resp, "stdout_kept")) != (json_int_t)want ||
            json_integer_value(json_object_get(resp, "stderr_kept")) != 0 ||
            memcmp(raw.bytes, stream + stream_len - want, want) != 0)
            abort();
        json_decref(resp);
        free(raw.bytes);
        free(stream);
        return;
    }
    char *b64 = capture_finish(&cap, &truncated);
    size_t kept_len;
    bool ok;
    unsigned char *kept = base64_decode(b64, &kept_len, &ok);
    if (!ok || truncated != (stream_len > limit))
        abort();
    size_t head = stream_len < (limit + 1) / 2 ? stream_len : (limit + 1) / 2;
    size_t tail = stream_len - head < limit - (limit + 1) / 2 ? stream_len - head
                                                              : limit - (limit + 1) / 2;
    if (kept_len < head + tail || memcmp(kept, stream, head) != 0 ||
        memcmp(kept + kept_len - tail, stream + stream_len - tail, tail) != 0)
        abort();
    free(kept);
    free(b64);
    free(stream);
}

/*
 * A /workspace/.meshignore (snapshot_exclude.c) and a path to match, split at the first NUL:
 * the list is parsed as a capture reads it, then the path (its NULs made '/') is matched as a
 * file and as a directory. Nothing may crash or take long (libFuzzer's timeout: the matching
 * must stay linear in the list and the path), and /workspace/.mesh is always left out.
 */
static void fuzz_meshignore(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t list_len = nul ? (size_t)(nul - data) : size;
    if (list_len > MESHIGNORE_MAX_BYTES)
        return;
    struct capture_exclusions ex;
    struct api_error err = {0};
    if (!capture_exclusions_parse(strndup((const char *)data, list_len), &ex, &err))
        return;
    if (!capture_excludes(&ex, ".mesh", ".mesh", true))
        abort();
    if (nul && size - list_len > 1) {
        size_t len = size - list_len - 1;
        char *path = malloc(len + 1);
        memcpy(path, nul + 1, len);
        path[len] = '\0';
        for (size_t i = 0; i < len; i++)
            if (path[i] == '\0')
                path[i] = '/';
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        capture_excludes(&ex, path, name, false);
        capture_excludes(&ex, path, name, true);
        free(path);
    }
    capture_exclusions_free(&ex);
}

/* One input: selector byte, then the bytes for that parser. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    g_config.max_output_bytes = 1 << 20;
    g_caps.egress_control = true;
    uint8_t which = data[0] % 7;
    data++;
    size--;
    if (which == 5) {
        fuzz_capture(data, size);
        return 0;
    }
    if (which == 6) {
        fuzz_meshignore(data, size);
        return 0;
    }
    char *text = strndup((const char *)data, size);
    struct api_error err = {0};
    if (which <= 2) {
        json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
        if (json_is_object(body)) {
            if (which == 2)
                fuzz_acquire_body(body);
            else
                fuzz_exec_body(body, which == 1);
        }
        json_decref(body);
    } else if (which == 3) {
        fuzz_path(data, size);
    } else if (which == 5) {
        json_t *body = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
        if (json_is_object(body))
            fuzz_capture_body(body);
        json_decref(body);
        json_decref(snapshot_list(text, &err));
    } else {
        json_decref(workspace_list(text, &err));
        workspace_id_valid(text);
    }
    free(text);
    return 0;
}
