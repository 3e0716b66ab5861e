/*
 * http.c - the HTTP front: listeners (TCP with bearer token, unix socket mode 0600), body
 * collection with a size limit, authentication, routing and JSON error responses.
 *
 * libmicrohttpd runs one thread per connection, so a long exec only occupies its own
 * connection, and HTTP keep-alive lets the extension's workers reuse connections.
 */
#include "http.h"
#include "background.h"
#include "capabilities.h"
#include "capture.h"
#include "config.h"
#include "exec.h"
#include "files.h"
#include "json.h"
#include "log.h"
#include "registry.h"
#include "route.h"
#include "single.h"
#include "snapshot.h"
#include "util.h"
#include "workspace.h"
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct MHD_Daemon *daemons[2];
static int in_flight;                    /* requests in flight; under in_flight_lock */
static pthread_mutex_t in_flight_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t in_flight_done = PTHREAD_COND_INITIALIZER;

/* Per-request state kept by libmicrohttpd between callbacks. */
struct request {
    unsigned char *body;
    size_t len, cap;
    bool too_large;
    bool counted;
};

/* One routed request: method, path segments (route.c) and body. */
struct route {
    struct MHD_Connection *conn;
    const char *method;
    char **segments;
    struct request *req;
};

/* Queues RESPONSE with STATUS and releases it; a response that could not be built (no
 * memory) closes the connection instead. */
static enum MHD_Result send_response(struct MHD_Connection *conn, unsigned status,
                                     struct MHD_Response *response)
{
    if (!response)
        return MHD_NO;
    enum MHD_Result r = MHD_queue_response(conn, status, response);
    MHD_destroy_response(response);
    return r;
}

/* Serialises JSON (consumed) as an application/json response. A document that could not be
 * built or serialised (allocation failure) is answered with a fixed 500 "internal" body. */
static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *json)
{
    static const char fallback[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
    char *text = json ? json_dumps(json, JSON_COMPACT | JSON_REAL_PRECISION(12)) : NULL;
    json_decref(json);
    struct MHD_Response *response =
        text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(sizeof fallback - 1, (void *)fallback,
                                               MHD_RESPMEM_PERSISTENT);
    if (!text)
        status = 500;
    else if (!response)
        free(text);
    if (response)
        MHD_add_response_header(response, "Content-Type", "application/json");
    return send_response(conn, status, response);
}

/* The protocol's error body {"error":{"code","message"}}. A handler that failed without
 * saying why is a bug; it is answered as 500 "internal", never with a NULL code. */
static enum MHD_Result send_error(struct MHD_Connection *conn, struct api_error *err)
{
    if (!err->http_status || !err->code)
        api_error_set(err, 500, "internal", "the request failed for an unknown reason");
    return send_json(conn, (unsigned)err->http_status,
                     json_pack("{s:{s:s,s:s}}", "error", "code", err->code, "message",
                               err->message));
}

/* Shorthand for an error built in place. */
static enum MHD_Result fail(struct MHD_Connection *conn, int status, const char *code,
                            const char *message)
{
    struct api_error err;
    api_error_set(&err, status, code, "%s", message);
    return send_error(conn, &err);
}

/* What a raw exec response holds until libmicrohttpd has sent it. */
struct raw_body {
    char *json;
    unsigned char *bytes;
};

/* Frees a raw exec response's parts once it is sent (or dropped). */
static void free_raw_body(void *cls)
{
    struct raw_body *b = cls;
    free(b->json);
    free(b->bytes);
    free(b);
}

/*
 * An exec's answer with output "tail": the JSON document (consumed) on one
 * line, "\n", then the kept output as raw bytes, sent from where they lie
 * (no base64, no copy).  RAW's bytes are taken over.
 */
static enum MHD_Result send_exec_output(struct MHD_Connection *conn, json_t *json,
                                        struct exec_output *raw)
{
    struct raw_body *b = calloc(1, sizeof *b);
    struct MHD_Response *response = NULL;
    if (b) {
        b->bytes = raw->bytes;
        b->json = json_dumps(json, JSON_COMPACT | JSON_REAL_PRECISION(12));
    } else {
        free(raw->bytes);
    }
    raw->bytes = NULL;
    json_decref(json);
    if (b && b->json) {
        struct MHD_IoVec iov[3] = {{b->json, strlen(b->json)}, {"\n", 1}, {b->bytes, raw->len}};
        response = MHD_create_response_from_iovec(iov, 3, free_raw_body, b);
    }
    if (!response) {
        if (b)
            free_raw_body(b);
        return send_json(conn, 500, NULL);
    }
    MHD_add_response_header(response, "Content-Type", "application/vnd.mesh.exec-output");
    return send_response(conn, 200, response);
}

/* A handler's result: the JSON document or the error it set. */
static enum MHD_Result send_result(struct MHD_Connection *conn, json_t *json,
                                   struct api_error *err)
{
    return json ? send_json(conn, 200, json) : send_error(conn, err);
}

/* Constant-time token comparison (time depends only on the presented length). */
static bool token_matches(const char *presented)
{
    const char *expected = g_config.token;
    size_t plen = strlen(presented), elen = strlen(expected);
    unsigned diff = plen != elen;
    for (size_t i = 0; i < plen; i++)
        diff |= (unsigned char)presented[i] ^ (unsigned char)expected[i % (elen ? elen : 1)];
    return diff == 0 && elen > 0;
}

/* TCP requests need "Authorization: Bearer <token>", or the token in X-Mesh-Sandboxd-Token
 * (a Kubernetes API server's pods/proxy keeps that header but consumes Authorization); the
 * unix socket's mode is the auth. */
static bool authorized(struct MHD_Connection *conn, bool tcp)
{
    if (!tcp)
        return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *header = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     "X-Mesh-Sandboxd-Token");
    if (auth && strncmp(auth, "Bearer ", 7) == 0)
        return token_matches(auth + 7);
    return header && token_matches(header);
}

/* Parses the body as a JSON object; an empty body is NULL without error. */
static bool parse_body(struct request *req, json_t **out, struct api_error *err)
{
    json_error_t jerr;
    *out = NULL;
    if (req->len == 0)
        return true;
    *out = json_loadb((const char *)req->body, req->len, JSON_ALLOW_NUL, &jerr);
    if (!*out) {
        api_error_set(err, 400, "bad_json", "body is not valid JSON: %s", jerr.text);
        return false;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        api_error_set(err, 400, "bad_request", "body must be a JSON object");
        return false;
    }
    return true;
}

/* GET/PUT/DELETE /v1/workspaces/{id} */
static enum MHD_Result route_workspace(struct route *r)
{
    struct api_error err = {0};
    json_t *body = NULL, *resp = NULL;
    const char *id = r->segments[2];
    if (strcmp(r->method, "GET") == 0) {
        struct workspace *ws = workspace_get(id, &err);
        if (ws) {
            resp = workspace_describe(ws);
            workspace_put(ws);
        }
        return send_result(r->conn, resp, &err);
    }
    if (strcmp(r->method, "PUT") != 0 && strcmp(r->method, "DELETE") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use GET, PUT or DELETE");
    if (!parse_body(r->req, &body, &err))
        return send_error(r->conn, &err);
    resp = strcmp(r->method, "PUT") == 0 ? workspace_acquire(id, body, &err)
                                         : workspace_release(id, body, &err);
    json_decref(body);
    return send_result(r->conn, resp, &err);
}

/* GET, PUT (capture) or DELETE /v1/snapshots/{id} */
static enum MHD_Result route_snapshot(struct route *r)
{
    struct api_error err = {0};
    json_t *body = NULL, *resp = NULL;
    const char *id = r->segments[2];
    if (strcmp(r->method, "GET") == 0)
        return send_result(r->conn, snapshot_get(id, &err), &err);
    if (strcmp(r->method, "DELETE") == 0)
        return send_result(r->conn, snapshot_delete(id, &err), &err);
    if (strcmp(r->method, "PUT") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use GET, PUT or DELETE");
    if (!parse_body(r->req, &body, &err))
        return send_error(r->conn, &err);
    resp = snapshot_capture(id, body, &err);
    json_decref(body);
    return send_result(r->conn, resp, &err);
}

/* Fetches a workspace that must be running for exec and file calls. */
static struct workspace *running_workspace(const char *id, struct api_error *err)
{
    struct workspace *ws = workspace_get(id, err);
    if (ws && workspace_state(ws) != WS_RUNNING) {
        api_error_set(err, 409, "workspace_not_running", "workspace \"%s\" is not running", id);
        workspace_put(ws);
        return NULL;
    }
    return ws;
}

/* POST /v1/workspaces/{id}/exec */
static enum MHD_Result route_exec(struct route *r)
{
    struct api_error err = {0};
    json_t *body = NULL, *resp = NULL;
    if (strcmp(r->method, "POST") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use POST");
    if (!parse_body(r->req, &body, &err))
        return send_error(r->conn, &err);
    if (!body) {
        api_error_set(&err, 400, "bad_request", "field \"argv\" is required");
        return send_error(r->conn, &err);
    }
    struct exec_output raw = {0};
    struct workspace *ws = running_workspace(r->segments[2], &err);
    if (ws) {
        resp = exec_run_request(ws, body, &raw, &err);
        workspace_put(ws);
    }
    json_decref(body);
    if (resp && raw.bytes)
        return send_exec_output(r->conn, resp, &raw);
    if (resp && json_is_true(json_object_get(resp, "background")))
        return send_json(r->conn, 202, resp);
    return send_result(r->conn, resp, &err);
}

/* Checks an exec call's body into its OUT (exec_signal_parse, exec_extend_parse). */
typedef bool (*exec_body_parser)(json_t *body, void *out, struct api_error *err);

static bool kill_body(json_t *body, void *out, struct api_error *err)
{
    return exec_signal_parse(body, out, err);
}

static bool extend_body(json_t *body, void *out, struct api_error *err)
{
    return exec_extend_parse(body, out, err);
}

/* A POST call on a running exec (kill, extend): its body checked by PARSE into OUT, and its
 * workspace, held (workspace_put it); NULL once the refusal is answered (*ANSWER). */
static struct workspace *exec_call_begin(struct route *r, exec_body_parser parse, void *out,
                                         enum MHD_Result *answer)
{
    struct api_error err = {0};
    json_t *body = NULL;
    if (strcmp(r->method, "POST") != 0) {
        *answer = fail(r->conn, 405, "method_not_allowed", "use POST");
        return NULL;
    }
    if (!parse_body(r->req, &body, &err)) {
        *answer = send_error(r->conn, &err);
        return NULL;
    }
    bool valid = parse(body, out, &err);
    json_decref(body);
    struct workspace *ws = valid ? workspace_get(r->segments[2], &err) : NULL;
    if (!ws)
        *answer = send_error(r->conn, &err);
    return ws;
}

/* POST /v1/workspaces/{id}/execs/{key}/kill [{"signal": NAME}] */
static enum MHD_Result route_kill(struct route *r)
{
    int sig;
    enum MHD_Result answer;
    struct workspace *ws = exec_call_begin(r, kill_body, &sig, &answer);
    if (!ws)
        return answer;
    bool killed = exec_kill_by_key(ws, r->segments[4], sig);
    workspace_put(ws);
    if (!killed)
        return fail(r->conn, 404, "exec_not_found", "no running exec with this key");
    return send_json(r->conn, 200, json_pack("{s:b}", "killed", 1));
}

/* POST /v1/workspaces/{id}/execs/{key}/extend {"by_ms": N} */
static enum MHD_Result route_extend(struct route *r)
{
    uint64_t by_ms, total_ms = 0;
    enum MHD_Result answer;
    struct workspace *ws = exec_call_begin(r, extend_body, &by_ms, &answer);
    if (!ws)
        return answer;
    enum exec_extend_result result = exec_extend_by_key(ws, r->segments[4], by_ms, &total_ms);
    workspace_put(ws);
    if (result == EXEC_UNKNOWN)
        return fail(r->conn, 404, "exec_not_found", "no running exec with this key");
    if (result == EXEC_ENDED)
        return fail(r->conn, 409, "exec_ended", "the exec already ended or is being ended "
                    "(timeout, kill, release): its deadline stays");
    return send_json(r->conn, 200, json_pack("{s:b,s:I}", "extended", 1, "timeout_ms",
                                             (json_int_t)total_ms));
}

/* Query argument NAME as a decimal number of at most MAX, FALLBACK when absent; false with
 * bad_request for anything else. */
static bool query_number(struct MHD_Connection *conn, const char *name, uint64_t fallback,
                         uint64_t max, uint64_t *out, struct api_error *err)
{
    const char *text = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    char *end;
    *out = fallback;
    if (!text)
        return true;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (!*text || *end || *text == '-' || errno != 0 || value > max) {
        api_error_set(err, 400, "bad_request", "query argument \"%s\" must be a number from 0 "
                      "to %llu", name, (unsigned long long)max);
        return false;
    }
    *out = value;
    return true;
}

/* GET /v1/workspaces/{id}/execs/{key}/output?stdout_from=N&stderr_from=M[&stdout_ack=A]
 * [&stderr_ack=E]&wait_ms=W&max_bytes=B: a background exec's output from the offsets on, framed
 * like an exec's output "tail" answer; acknowledged up to the _ack offsets (default: the _from
 * ones). */
static enum MHD_Result route_exec_output(struct route *r)
{
    struct api_error err = {0};
    struct output_query q;
    uint64_t max_bytes;
    if (strcmp(r->method, "GET") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use GET");
    if (!query_number(r->conn, "stdout_from", 0, INT64_MAX, &q.from[0], &err) ||
        !query_number(r->conn, "stderr_from", 0, INT64_MAX, &q.from[1], &err) ||
        !query_number(r->conn, "stdout_ack", q.from[0], q.from[0], &q.ack[0], &err) ||
        !query_number(r->conn, "stderr_ack", q.from[1], q.from[1], &q.ack[1], &err) ||
        !query_number(r->conn, "wait_ms", 0, 60000, &q.wait_ms, &err) ||
        !query_number(r->conn, "max_bytes", 1u << 20, 16u << 20, &max_bytes, &err))
        return send_error(r->conn, &err);
    q.max_bytes = (size_t)max_bytes;
    struct workspace *ws = workspace_get(r->segments[2], &err);
    if (!ws)
        return send_error(r->conn, &err);
    struct exec_output raw = {0};
    json_t *resp = background_output(ws, r->segments[4], &q, &raw, &err);
    workspace_put(ws);
    return resp ? send_exec_output(r->conn, resp, &raw) : send_error(r->conn, &err);
}

/* DELETE /v1/workspaces/{id}/execs/{key}: forgets an ended background exec's record. */
static enum MHD_Result route_exec_record(struct route *r)
{
    struct api_error err = {0};
    if (strcmp(r->method, "DELETE") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use DELETE");
    struct workspace *ws = workspace_get(r->segments[2], &err);
    if (!ws)
        return send_error(r->conn, &err);
    bool forgotten = background_forget(ws, r->segments[4], &err);
    workspace_put(ws);
    if (!forgotten)
        return send_error(r->conn, &err);
    return send_response(r->conn, 204,
                         MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
}

/* GET/PUT /v1/workspaces/{id}/files?path=P[&mode=M] */
static enum MHD_Result route_files(struct route *r)
{
    struct api_error err = {0};
    const char *path = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "path");
    bool get = strcmp(r->method, "GET") == 0;
    if (!get && strcmp(r->method, "PUT") != 0)
        return fail(r->conn, 405, "method_not_allowed", "use GET or PUT");
    struct workspace *ws = running_workspace(r->segments[2], &err);
    if (!ws)
        return send_error(r->conn, &err);
    enum MHD_Result result;
    if (get) {
        struct file_data file;
        if (files_read(ws, path, &file, &err)) {
            char mode[16];
            struct MHD_Response *response =
                MHD_create_response_from_buffer(file.len, file.bytes, MHD_RESPMEM_MUST_FREE);
            snprintf(mode, sizeof mode, "%04o", file.mode);
            MHD_add_response_header(response, "Content-Type", "application/octet-stream");
            MHD_add_response_header(response, "X-Mesh-File-Mode", mode);
            result = send_response(r->conn, 200, response);
        } else {
            result = send_error(r->conn, &err);
        }
    } else {
        const char *mode = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "mode");
        json_t *resp = files_write(ws, path, mode, r->req->body ? r->req->body : (void *)"",
                                   r->req->len, &err);
        result = send_result(r->conn, resp, &err);
    }
    workspace_put(ws);
    return result;
}

/* Dispatches a complete request to its handler. */
static enum MHD_Result dispatch(struct MHD_Connection *conn, const char *url, const char *method,
                                struct request *req)
{
    struct route_path path;
    struct route r = {.conn = conn, .method = method, .req = req};
    enum MHD_Result result;
    enum route_kind kind = route_match(url, &path);
    r.segments = path.segments;
    if (single_workspace_refuses(kind, &path))
        kind = ROUTE_REFUSED;
    switch (kind) {
    case ROUTE_CAPABILITIES:
        result = strcmp(method, "GET") == 0
                     ? send_json(conn, 200, caps_to_json())
                     : fail(conn, 405, "method_not_allowed", "use GET");
        break;
    case ROUTE_WORKSPACES: {
        struct api_error err = {0};
        const char *label = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "label");
        result = strcmp(method, "GET") == 0
                     ? send_result(conn, workspace_list(label, &err), &err)
                     : fail(conn, 405, "method_not_allowed", "use GET");
        break;
    }
    case ROUTE_SNAPSHOTS: {
        struct api_error err = {0};
        const char *label = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "label");
        result = strcmp(method, "GET") == 0
                     ? send_result(conn, snapshot_list(label, &err), &err)
                     : fail(conn, 405, "method_not_allowed", "use GET");
        break;
    }
    case ROUTE_SNAPSHOT: result = route_snapshot(&r); break;
    case ROUTE_WORKSPACE: result = route_workspace(&r); break;
    case ROUTE_EXEC: result = route_exec(&r); break;
    case ROUTE_FILES: result = route_files(&r); break;
    case ROUTE_KILL: result = route_kill(&r); break;
    case ROUTE_EXTEND: result = route_extend(&r); break;
    case ROUTE_EXEC_OUTPUT: result = route_exec_output(&r); break;
    case ROUTE_EXEC_RECORD: result = route_exec_record(&r); break;
    case ROUTE_REFUSED:
        result = fail(conn, 403, "workspace_refused",
                      "this daemon serves one workspace (--single-workspace), not this one, "
                      "and keeps no snapshots");
        break;
    default: result = fail(conn, 404, "not_found", "no such route");
    }
    route_path_free(&path);
    return result;
}

/* Appends an upload chunk, or marks the request too large (the rest is discarded); false
 * when memory runs out. */
static bool collect_body(struct request *req, const char *data, size_t size)
{
    if (req->too_large || req->len + size > g_config.max_body_bytes) {
        req->too_large = true;
        return true;
    }
    if (req->len + size > req->cap) {
        size_t cap = (req->len + size) * 2;
        unsigned char *body = realloc(req->body, cap);
        if (!body)
            return false;
        req->body = body;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, size);
    req->len += size;
    return true;
}

/* Counts requests in flight so that SIGTERM can drain them; the last one wakes the drain. */
static void count_request(struct request *req, int delta)
{
    pthread_mutex_lock(&in_flight_lock);
    in_flight += delta;
    if (in_flight == 0)
        pthread_cond_broadcast(&in_flight_done);
    pthread_mutex_unlock(&in_flight_lock);
    req->counted = delta > 0;
}

/* libmicrohttpd access handler: first call checks auth and declared size, upload calls
 * collect the body, the last call dispatches. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    bool tcp = cls != NULL;
    struct request *req = *con_cls;
    (void)version;
    if (!req) {
        req = calloc(1, sizeof *req);
        if (!req)
            return MHD_NO;   /* no memory: close the connection */
        *con_cls = req;
        count_request(req, 1);
        if (__atomic_load_n(&g_shutting_down, __ATOMIC_SEQ_CST))
            return fail(conn, 503, "shutting_down", "the daemon is shutting down");
        if (!authorized(conn, tcp))
            return fail(conn, 401, "unauthorized", "missing or wrong bearer token");
        const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                         "Content-Length");
        if (length && strtoull(length, NULL, 10) > g_config.max_body_bytes)
            return fail(conn, 413, "body_too_large", "request body over the limit");
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!collect_body(req, upload_data, *upload_data_size))
            return fail(conn, 503, "out_of_resources", "the daemon is out of memory; retry later");
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->too_large)
        return fail(conn, 413, "body_too_large", "request body over the limit");
    return dispatch(conn, url, method, req);
}

/* Frees per-request state when libmicrohttpd is done with the request. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    struct request *req = *con_cls;
    (void)cls;
    (void)conn;
    (void)code;
    if (!req)
        return;
    if (req->counted)
        count_request(req, -1);
    free(req->body);
    free(req);
    *con_cls = NULL;
}

/* Starts one libmicrohttpd daemon on LISTEN_FD; TCP ones require the token. */
static struct MHD_Daemon *start_mhd(int listen_fd, bool tcp)
{
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, tcp ? (void *)1 : NULL,
                            MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)600, MHD_OPTION_END);
}

/* Binds the TCP listener (--listen ADDR:PORT). */
static int listen_tcp(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(g_config.listen_port)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (inet_pton(AF_INET, g_config.listen_addr, &addr.sin_addr) != 1) {
        log_event("--listen: %s is not an IPv4 address", g_config.listen_addr);
        close(fd);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 128) != 0) {
        log_event("cannot listen on %s:%d: %s", g_config.listen_addr, g_config.listen_port,
                  strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Binds the unix socket (--socket PATH), mode 0600. Never through umask(): the mask is the
 * whole process's, and a holder or agent forked meanwhile by another thread (the standby pool
 * fills in the background) would keep it, and with it every file its commands create. Under
 * the daemon's umask 022 the socket is born 0755, which only its owner may connect to (connect
 * needs write permission), then narrowed to 0600. */
static int listen_unix(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct stat st;
    if (strlen(g_config.socket_path) >= sizeof addr.sun_path) {
        log_event("--socket path too long");
        return -1;
    }
    strcpy(addr.sun_path, g_config.socket_path);
    if (lstat(g_config.socket_path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(g_config.socket_path);   /* stale: we hold the state-dir lock */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    if (rc != 0 || chmod(g_config.socket_path, 0600) != 0 || listen(fd, 128) != 0) {
        log_event("cannot listen on %s: %s", g_config.socket_path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Starts the configured listeners. */
bool http_start(void)
{
    if (g_config.listen_addr) {
        int fd = listen_tcp();
        daemons[0] = fd >= 0 ? start_mhd(fd, true) : NULL;
        if (!daemons[0])
            return false;
        log_event("listening on %s:%d", g_config.listen_addr, g_config.listen_port);
    }
    if (g_config.socket_path) {
        int fd = listen_unix();
        daemons[1] = fd >= 0 ? start_mhd(fd, false) : NULL;
        if (!daemons[1])
            return false;
        log_event("listening on unix socket %s", g_config.socket_path);
    }
    return true;
}

/* Drain: stop accepting, answer 503 to new requests on open connections, wait for requests
 * in flight (calling EACH_TURN, when given, every 10 ms while they drain), then close
 * everything. */
void http_stop(void (*each_turn)(void))
{
    __atomic_store_n(&g_shutting_down, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2; i++)
        if (daemons[i]) {
            int fd = MHD_quiesce_daemon(daemons[i]);
            if (fd >= 0)
                close(fd);
        }
    double next_log = 0;
    pthread_mutex_lock(&in_flight_lock);
    while (in_flight > 0) {
        if (each_turn) {   /* repeated every 10 ms while requests drain */
            pthread_mutex_unlock(&in_flight_lock);
            each_turn();
            pthread_mutex_lock(&in_flight_lock);
        }
        if (monotonic_ms() >= next_log) {
            log_event("draining: %d request(s) in flight", in_flight);
            next_log = monotonic_ms() + 10000;
        }
        struct timespec until = realtime_in_ms(each_turn ? 10 : 10000);
        pthread_cond_timedwait(&in_flight_done, &in_flight_lock, &until);
    }
    pthread_mutex_unlock(&in_flight_lock);
    for (int i = 0; i < 2; i++)
        if (daemons[i])
            MHD_stop_daemon(daemons[i]);
    if (g_config.socket_path)
        unlink(g_config.socket_path);
}
