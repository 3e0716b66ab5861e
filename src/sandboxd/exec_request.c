/*
 * exec_request.c - an exec request's body checked against docs/protocol.md and turned into
 * what the run needs: argv, the environment (the protocol's base, the egress proxy's
 * variables when the workspace has network, the request's own), stdin, the key, the timeout
 * and the output budget.
 */
#include "exec_request.h"
#include "config.h"
#include "egress.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 300000

/* Frees what exec_parse allocated. */
void exec_request_free(struct exec_request *req)
{
    if (req->argv)
        free(req->argv);
    if (req->envp) {
        for (char **e = req->envp; *e; e++)
            free(*e);
        free(req->envp);
    }
    free(req->stdin_data);
}

/* The egress proxy's variables (network open or allowlist): proxy-aware clients reach the
 * outside through it; localhost stays direct (the sandbox's own loopback). */
static void add_proxy_env(json_t *merged)
{
    static const char *names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", EGRESS_PORT);
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(merged, names[i], json_string(url));
    json_object_set_new(merged, "NO_PROXY", json_string("localhost,127.0.0.1,::1"));
    json_object_set_new(merged, "no_proxy", json_string("localhost,127.0.0.1,::1"));
}

/* Builds envp: the protocol's base environment overlaid with the request's env. */
static bool build_env(struct exec_request *req, json_t *env, bool proxy, struct api_error *err)
{
    static const char *base[][2] = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                    {"HOME", "/workspace"},
                                    {"LANG", "C.UTF-8"},
                                    {"TMPDIR", "/tmp"}};
    json_t *merged = json_object();
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(merged, base[i][0], json_string(base[i][1]));
    if (proxy)
        add_proxy_env(merged);
    if (env) {
        const char *name;
        json_t *value;
        json_object_foreach(env, name, value) {
            if (!*name || strchr(name, '=')) {
                api_error_set(err, 400, "bad_request", "env name \"%s\" is invalid", name);
                json_decref(merged);
                return false;
            }
        }
        json_object_update(merged, env);
    }
    size_t n = json_object_size(merged), i = 0;
    const char *name;
    json_t *value;
    req->envp = calloc(n + 1, sizeof(char *));
    json_object_foreach(merged, name, value)
        req->envp[i++] = xasprintf("%s=%s", name, json_string_value(value));
    json_decref(merged);
    return true;
}

/* exec_key: a string, or an integer taken as its decimal text. */
static bool parse_exec_key(json_t *body, struct exec_request *req, struct api_error *err)
{
    json_t *v = json_object_get(body, "exec_key");
    if (json_is_integer(v)) {
        snprintf(req->key_buf, sizeof req->key_buf, "%lld", (long long)json_integer_value(v));
        req->key = req->key_buf;
        return true;
    }
    return json_get_string(body, "exec_key", &req->key, err);
}

/* Validates the exec body against protocol.md; fills REQ or ERR. */
bool exec_parse(struct workspace *ws, json_t *body, struct exec_request *req,
                struct api_error *err)
{
    json_t *argv = json_object_get(body, "argv"), *env = NULL;
    const char *stdin_b64 = NULL, *output = NULL;
    uint64_t max_output = g_config.max_output_bytes;
    memset(req, 0, sizeof *req);
    req->dir = ".";
    req->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (!json_is_array(argv) || json_array_size(argv) == 0) {
        api_error_set(err, 400, "bad_request", "field \"argv\" must be a non-empty array");
        return false;
    }
    req->argv = calloc(json_array_size(argv) + 1, sizeof(char *));
    for (size_t i = 0; i < json_array_size(argv); i++) {
        json_t *a = json_array_get(argv, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a)) {
            api_error_set(err, 400, "bad_request", "field \"argv\" must hold NUL-free strings");
            return false;
        }
        req->argv[i] = (char *)json_string_value(a);
    }
    if (!json_get_string(body, "dir", &req->dir, err) ||
        !json_get_object(body, "env", &env, err) ||
        (env && !json_string_map_valid(env, "env", err)) ||
        !json_get_string(body, "stdin_b64", &stdin_b64, err) ||
        !json_get_uint(body, "timeout_ms", &req->timeout_ms, err) ||
        !parse_exec_key(body, req, err) ||
        !json_get_uint(body, "max_output_bytes", &max_output, err) ||
        !json_get_string(body, "output", &output, err) ||
        !json_get_bool(body, "background", &req->background, err) ||
        !build_env(req, env, egress_wanted(ws), err))
        return false;
    if (req->background && !req->key) {
        api_error_set(err, 400, "bad_request", "field \"exec_key\" is required with "
                      "\"background\": it names the exec from then on");
        return false;
    }
    if (!*req->dir)
        req->dir = ".";
    if (output && strcmp(output, "tail") != 0 && strcmp(output, "head_tail") != 0) {
        api_error_set(err, 400, "bad_request", "field \"output\" must be \"head_tail\" or \"tail\"");
        return false;
    }
    req->output_tail = output && strcmp(output, "tail") == 0;
    size_t cap = req->output_tail ? g_config.max_kept_output_bytes : g_config.max_output_bytes;
    req->max_output = max_output < cap ? max_output : cap;
    if (stdin_b64) {
        bool ok;
        req->stdin_data = base64_decode(stdin_b64, &req->stdin_len, &ok);
        req->has_stdin = true;
        if (!ok) {
            api_error_set(err, 400, "bad_request", "field \"stdin_b64\" is not valid base64");
            return false;
        }
    }
    return true;
}
