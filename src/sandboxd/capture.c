/*
 * capture.c - one output stream of an exec, clamped to a byte budget as it arrives: head and
 * tail around a marker, or (output "tail") only the most recent bytes, as they came; and how
 * it leaves in an answer (base64 in the JSON document, or raw after it).
 */
#include "capture.h"
#include "json.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sizes a capture for LIMIT bytes per stream: half head, half tail, or all tail. */
void capture_init(struct capture *cap, size_t limit, bool tail_only)
{
    memset(cap, 0, sizeof *cap);
    cap->head_cap = tail_only ? 0 : (limit + 1) / 2;
    cap->tail_cap = limit - cap->head_cap;
}

/* Makes room for NEED bytes in a buffer of *ALLOC (doubling, at most CAP); false: no memory. */
static bool capture_grow(unsigned char **buf, size_t *alloc, size_t need, size_t cap)
{
    if (need <= *alloc)
        return true;
    size_t size = *alloc ? *alloc : 65536;
    while (size < need)
        size *= 2;
    if (size > cap)
        size = cap;
    unsigned char *grown = realloc(*buf, size);
    if (!grown)
        return false;
    *buf = grown;
    *alloc = size;
    return true;
}

/* Adds bytes to the tail ring: it keeps the most recent tail_cap of them. */
static void capture_tail(struct capture *cap, const unsigned char *data, size_t len)
{
    if (cap->tail_cap == 0 || len == 0)
        return;
    if (len >= cap->tail_cap) {                  /* only the last tail_cap bytes stay */
        data += len - cap->tail_cap;
        len = cap->tail_cap;
        cap->tail_start = cap->tail_len = 0;
    }
    /* a ring that has not wrapped is linear from 0: growing it keeps its bytes */
    size_t need = cap->tail_len + len > cap->tail_cap ? cap->tail_cap : cap->tail_len + len;
    if (!capture_grow(&cap->tail, &cap->tail_alloc, need, cap->tail_cap))
        return;                                  /* out of memory: these bytes are dropped */
    size_t pos = (cap->tail_start + cap->tail_len) % cap->tail_cap;
    size_t first = cap->tail_cap - pos < len ? cap->tail_cap - pos : len;
    memcpy(cap->tail + pos, data, first);
    memcpy(cap->tail, data + first, len - first);
    if (cap->tail_len + len > cap->tail_cap) {
        cap->tail_start = (cap->tail_start + cap->tail_len + len - cap->tail_cap) % cap->tail_cap;
        cap->tail_len = cap->tail_cap;
    } else {
        cap->tail_len += len;
    }
}

/* Adds bytes: the head fills first, then the tail ring keeps the most recent bytes. */
static void capture_append(struct capture *cap, const unsigned char *data, size_t len)
{
    cap->total += len;
    size_t to_head = cap->head_cap - cap->head_len < len ? cap->head_cap - cap->head_len : len;
    if (to_head > 0 && !cap->head && !(cap->head = malloc(cap->head_cap)))
        to_head = 0;                             /* out of memory: these bytes are dropped */
    if (to_head > 0) {
        memcpy(cap->head + cap->head_len, data, to_head);
        cap->head_len += to_head;
    }
    capture_tail(cap, data + to_head, len - to_head);
}

/*
 * The marker between head and tail when bytes were omitted ("" otherwise,
 * and always for a tail-only capture, whose *_bytes tell what went before).
 */
static void capture_marker(const struct capture *cap, char *marker, size_t size,
                           bool *truncated)
{
    uint64_t omitted = cap->total - cap->head_len - cap->tail_len;
    marker[0] = '\0';
    if (omitted > 0) {
        if (cap->head_cap > 0)
            snprintf(marker, size, "\n\xe2\x80\xa6[mesh: %llu bytes omitted]\xe2\x80\xa6\n",
                     (unsigned long long)omitted);
        *truncated = true;
    }
}

/* Bytes capture_copy writes: head, marker, tail. */
static size_t capture_kept_len(const struct capture *cap, const char *marker)
{
    return cap->head_len + strlen(marker) + cap->tail_len;
}

/* Copies head + marker + tail (the ring unrolled) to DST; returns the byte after them. */
static unsigned char *capture_copy(const struct capture *cap, const char *marker,
                                   unsigned char *dst)
{
    if (cap->head_len > 0)
        memcpy(dst, cap->head, cap->head_len);
    dst += cap->head_len;
    memcpy(dst, marker, strlen(marker));
    dst += strlen(marker);
    size_t first = cap->tail_cap - cap->tail_start < cap->tail_len
                 ? cap->tail_cap - cap->tail_start : cap->tail_len;
    if (first > 0)
        memcpy(dst, cap->tail + cap->tail_start, first);
    if (cap->tail_len > first)
        memcpy(dst + first, cap->tail, cap->tail_len - first);
    return dst + cap->tail_len;
}

/* Frees the capture's buffers. */
void capture_free(struct capture *cap)
{
    free(cap->head);
    free(cap->tail);
    cap->head = cap->tail = NULL;
}

/* Base64 of head + marker + tail, for the JSON response; frees the capture. */
char *capture_finish(struct capture *cap, bool *truncated)
{
    char marker[96];
    capture_marker(cap, marker, sizeof marker, truncated);
    size_t len = capture_kept_len(cap, marker);
    unsigned char *flat = malloc(len + 1);
    char *b64 = NULL;
    if (flat) {
        capture_copy(cap, marker, flat);
        b64 = base64_encode(flat, len);
        free(flat);
    }
    if (!b64)
        b64 = strdup("");
    capture_free(cap);
    return b64;
}

/*
 * Both tail-only captures as the raw body's bytes (stdout then stderr), the
 * kept lengths in the response; frees the captures.  False: no memory.
 */
bool capture_finish_raw(struct capture *out, struct capture *errc, json_t *resp,
                        struct exec_output *raw, bool *truncated)
{
    char marker[96];    /* "" for tail-only captures */
    capture_marker(out, marker, sizeof marker, truncated);
    capture_marker(errc, marker, sizeof marker, truncated);
    size_t out_len = capture_kept_len(out, ""), err_len = capture_kept_len(errc, "");
    raw->bytes = malloc(out_len + err_len + 1);
    if (raw->bytes) {
        capture_copy(errc, "", capture_copy(out, "", raw->bytes));
        raw->len = out_len + err_len;
        json_object_set_new(resp, "stdout_kept", json_integer((json_int_t)out_len));
        json_object_set_new(resp, "stderr_kept", json_integer((json_int_t)err_len));
    }
    capture_free(out);
    capture_free(errc);
    return raw->bytes != NULL;
}

/* Reads what is available from the non-blocking FD into CAP (stops at EAGAIN or EOF). False
 * at the pipe's end. */
bool capture_read(int fd, struct capture *cap)
{
    unsigned char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        capture_append(cap, buf, (size_t)n);
    return n != 0;
}
