/*
 * exec_request.h - a parsed exec request, and the parser of its body (exec_request.c).
 */
#ifndef MESH_SANDBOXD_EXEC_REQUEST_H
#define MESH_SANDBOXD_EXEC_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "json.h"
#include "registry.h"

/* Parsed exec request. */
struct exec_request {
    char **argv;
    char **envp;
    const char *dir;
    unsigned char *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    uint64_t timeout_ms;
    const char *key;
    char key_buf[32];
    size_t max_output;
    bool output_tail;                /* keep only the last max_output bytes, no marker */
    bool background;                 /* answer at once; the output goes to a record */
};

bool exec_parse(struct workspace *ws, json_t *body, struct exec_request *req,
                struct api_error *err);
void exec_request_free(struct exec_request *req);

#endif
