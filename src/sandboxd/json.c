/*
 * json.c - typed field access with protocol errors, and base64 for exec payloads.
 *
 * Every accessor names the offending field in a bad_request error, so that callers get a
 * clear message for wrong types instead of a crash.
 */
#include "json.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills ERR with a status, a stable code and a formatted human message. */
void api_error_set(struct api_error *err, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    err->http_status = status;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

/* True for errors that mean "out of descriptors, memory, processes or disk right now". */
bool errno_is_exhaustion(int error)
{
    return error == EMFILE || error == ENFILE || error == ENOMEM || error == ENOSPC ||
           error == EAGAIN;
}

/* Fills ERR for a failed system call: running out of descriptors, memory or disk is 503
 * out_of_resources (the caller may retry; nothing was left half made), the workspace's disk
 * quota 507 disk_quota, anything else 500 internal. WHAT names the step. */
void api_error_from_errno(struct api_error *err, int error, const char *what)
{
    if (error == EDQUOT)   /* the workspace's own disk quota (quota.c) */
        api_error_set(err, 507, "disk_quota", "%s: the workspace is at its disk quota; remove "
                      "files in it, or use a larger size tier", what);
    else if (errno_is_exhaustion(error))
        api_error_set(err, 503, "out_of_resources", "%s: %s; retry later", what,
                      strerror(error));
    else
        api_error_set(err, 500, "internal", "%s: %s", what, strerror(error));
}

/* Optional string field: absent leaves *OUT untouched; wrong type is bad_request. */
bool json_get_string(json_t *obj, const char *field, const char **out, struct api_error *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v)) {
        api_error_set(err, 400, "bad_request", "field \"%s\" must be a string", field);
        return false;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        api_error_set(err, 400, "bad_request", "field \"%s\" contains NUL", field);
        return false;
    }
    *out = json_string_value(v);
    return true;
}

/* Optional non-negative integer field. */
bool json_get_uint(json_t *obj, const char *field, uint64_t *out, struct api_error *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        api_error_set(err, 400, "bad_request", "field \"%s\" must be a non-negative integer",
                      field);
        return false;
    }
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Optional boolean field. */
bool json_get_bool(json_t *obj, const char *field, bool *out, struct api_error *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_boolean(v)) {
        api_error_set(err, 400, "bad_request", "field \"%s\" must be true or false", field);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* Optional object field. */
bool json_get_object(json_t *obj, const char *field, json_t **out, struct api_error *err)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_object(v)) {
        api_error_set(err, 400, "bad_request", "field \"%s\" must be an object", field);
        return false;
    }
    *out = v;
    return true;
}

/* Checks that MAP (labels, env) holds only NUL-free string values. */
bool json_string_map_valid(json_t *map, const char *field, struct api_error *err)
{
    const char *key;
    json_t *value;
    json_object_foreach(map, key, value) {
        if (!json_is_string(value) ||
            strlen(json_string_value(value)) != json_string_length(value)) {
            api_error_set(err, 400, "bad_request", "field \"%s\" must map strings to strings",
                          field);
            return false;
        }
    }
    return true;
}

/* A JSON number, or null when the measurement is not available on this host. */
json_t *json_number_or_null(bool present, double value)
{
    return present ? json_real(value) : json_null();
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 with padding (exec stdout/stderr). */
char *base64_encode(const unsigned char *data, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)data[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)data[i + 1] << 8;
        if (i + 2 < len)
            v |= data[i + 2];
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/* Value of one base64 character, -1 when it is not one. */
static int b64_value(char c)
{
    const char *p = c ? strchr(b64_alphabet, c) : NULL;
    return p ? (int)(p - b64_alphabet) : -1;
}

/* Decodes standard base64 (padding optional, no whitespace); *OK false on bad input. */
unsigned char *base64_decode(const char *text, size_t *out_len, bool *ok)
{
    size_t len = strlen(text);
    while (len > 0 && text[len - 1] == '=')
        len--;
    unsigned char *out = malloc(len * 3 / 4 + 3);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    *ok = true;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value(text[i]);
        if (v < 0) {
            *ok = false;
            break;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    *out_len = o;
    return out;
}

/* A list call's "label=key=value" filter: KEY (bounded) and VALUE (in FILTER); no filter
 * leaves *VALUE NULL. bad_request when it is not key=value. */
bool label_filter_parse(const char *filter, char *key, size_t key_size, const char **value,
                        struct api_error *err)
{
    *value = NULL;
    key[0] = '\0';
    if (!filter)
        return true;
    const char *eq = strchr(filter, '=');
    if (!eq || eq == filter || (size_t)(eq - filter) >= key_size) {
        api_error_set(err, 400, "bad_request", "query parameter \"label\" must be key=value");
        return false;
    }
    memcpy(key, filter, (size_t)(eq - filter));
    key[eq - filter] = '\0';
    *value = eq + 1;
    return true;
}

/* True when LABELS hold KEY=VALUE, or there is no filter (VALUE NULL). */
bool labels_match(json_t *labels, const char *key, const char *value)
{
    json_t *v = value ? json_object_get(labels, key) : NULL;
    return !value || (json_is_string(v) && strcmp(json_string_value(v), value) == 0);
}
