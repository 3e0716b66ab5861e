/*
 * files.h - reading and atomically writing a workspace's files, resolved inside its sandbox's
 * root (files.c).
 */
#ifndef MESH_SANDBOXD_FILES_H
#define MESH_SANDBOXD_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "json.h"
#include "registry.h"

struct file_data {
    unsigned char *bytes;
    size_t len;
    unsigned mode;
};
bool files_read(struct workspace *ws, const char *path, struct file_data *out, struct api_error *err);
json_t *files_write(struct workspace *ws, const char *path, const char *mode_text,
                    const unsigned char *data, size_t len, struct api_error *err);

#endif
