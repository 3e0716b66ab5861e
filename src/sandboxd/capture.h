/*
 * capture.h - an exec's output streams, each clamped to a byte budget (capture.c).
 */
#ifndef MESH_SANDBOXD_CAPTURE_H
#define MESH_SANDBOXD_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* An exec's kept output as raw bytes, stdout then stderr (output "tail"); malloc'd. */
struct exec_output {
    unsigned char *bytes;
    size_t len;
};

/*
 * One output stream, clamped to a byte budget: head and tail with a marker
 * between them, or (output "tail") only the most recent bytes, as they came.
 * Both buffers grow as bytes arrive, up to their caps.
 */
struct capture {
    unsigned char *head, *tail;
    size_t head_cap, head_len;
    size_t tail_cap, tail_alloc, tail_start, tail_len;  /* ring buffer once full */
    uint64_t total;
};
void capture_init(struct capture *cap, size_t limit, bool tail_only);
bool capture_read(int fd, struct capture *cap);
char *capture_finish(struct capture *cap, bool *truncated);
bool capture_finish_raw(struct capture *out, struct capture *errc, json_t *resp,
                        struct exec_output *raw, bool *truncated);
void capture_free(struct capture *cap);

#endif
