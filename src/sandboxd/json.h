/*
 * json.h - protocol errors travelling back to the HTTP layer, typed JSON field access that
 * names the offending field, label filters and base64 (json.c).
 */
#ifndef MESH_SANDBOXD_JSON_H
#define MESH_SANDBOXD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* ---- errors: a protocol error travelling back to the HTTP layer ---- */
struct api_error {
    int http_status;            /* 0 = no error */
    const char *code;           /* stable code from protocol.md */
    char message[512];
};
void api_error_set(struct api_error *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void api_error_from_errno(struct api_error *err, int error, const char *what);
bool errno_is_exhaustion(int error);

/* ---- JSON helpers ---- */
bool json_get_string(json_t *obj, const char *field, const char **out, struct api_error *err);
bool json_get_uint(json_t *obj, const char *field, uint64_t *out, struct api_error *err);
bool json_get_bool(json_t *obj, const char *field, bool *out, struct api_error *err);
bool json_get_object(json_t *obj, const char *field, json_t **out, struct api_error *err);
bool json_string_map_valid(json_t *map, const char *field, struct api_error *err);
bool label_filter_parse(const char *filter, char *key, size_t key_size, const char **value,
                        struct api_error *err);
bool labels_match(json_t *labels, const char *key, const char *value);
char *base64_encode(const unsigned char *data, size_t len);
unsigned char *base64_decode(const char *text, size_t *out_len, bool *ok);
json_t *json_number_or_null(bool present, double value);

#endif
