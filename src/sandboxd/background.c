/*
 * background.c - the records of background execs (docs/protocol.md, "Background execs").
 *
 * A background exec answers 202 as soon as the workspace's exec agent has the command; a
 * thread of its own (exec.c) then supervises it like any exec, and feeds its record here: each
 * stream's bytes its client has not acknowledged yet, and in the end the exec's end fields.
 * GET .../execs/{key}/output acknowledges bytes (they are dropped), waits for new ones and
 * answers the rest; DELETE .../execs/{key} forgets an ended record. Backpressure instead of
 * loss: once a stream holds the cap (--background-buffer-bytes) the supervisor stops reading
 * that pipe, so the command blocks on write until the client fetches. All records' buffers
 * together are bounded too (--background-buffer-total): past it no buffer grows beyond a
 * pipe's capacity (BUFFER_FLOOR), which every stream may always hold, so none starves, and a
 * stream held back by the total holds unacknowledged bytes: its own client's next fetch wakes
 * it. A buffer emptied by an acknowledgement is freed.
 *
 * Records live in their workspace's list (ws->backgrounds, under ws->lock) until DELETE,
 * release or hibernation (workspace_stop), or --background-ttl (10 minutes) after its end. Each is
 * reference-counted: the list, the supervisor and every request using it hold one. Lock order:
 * ws->lock, then a record's lock; nothing takes ws->lock while holding a record's.
 */
#include "background.h"
#include "capture.h"
#include "config.h"
#include "json.h"
#include "log.h"
#include "registry.h"
#include "util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define END_DRAIN_MAX (1u << 20)            /* held past the cap when draining an ended exec */
#define BUFFER_FLOOR 65536                  /* a buffer this size is never refused */

/* One stream's bytes not yet acknowledged: BASE is the stream offset of buf[start]. */
struct held {
    unsigned char *buf;
    size_t alloc, start, len;
    uint64_t base;
};

struct background {
    struct background *next;       /* ws->backgrounds, under ws->lock */
    char *key;
    int refs;                      /* atomic */
    int wake_fd;                   /* eventfd: bytes were acknowledged, the pipes may be read */
    pthread_mutex_t lock;          /* everything below */
    pthread_cond_t changed;        /* new bytes, or the end */
    struct held streams[2];        /* stdout, stderr */
    json_t *end;                   /* the end fields (or an error), NULL while running */
    double ended_at;               /* monotonic ms */
};

/* Bytes allocated for all records' buffers (atomic), against --background-buffer-total. */
static size_t buffers_allocated;

/* Counts GROWTH more bytes of buffer: false (nothing counted) when that would pass the total,
 * unless FORCE (a buffer of BUFFER_FLOOR, or an ended exec's last bytes). */
static bool buffers_take(size_t growth, bool force)
{
    size_t now = __atomic_add_fetch(&buffers_allocated, growth, __ATOMIC_ACQ_REL);
    if (force || now <= g_config.background_buffer_total)
        return true;
    __atomic_sub_fetch(&buffers_allocated, growth, __ATOMIC_ACQ_REL);
    return false;
}

/* A buffer of SIZE bytes was freed. */
static void buffers_give(size_t size)
{
    __atomic_sub_fetch(&buffers_allocated, size, __ATOMIC_ACQ_REL);
}

/* Frees STREAM's buffer (it holds nothing, or its record goes). */
static void held_free(struct held *h)
{
    free(h->buf);
    buffers_give(h->alloc);
    h->buf = NULL;
    h->alloc = h->start = 0;
}

/* Supervisor threads running, so the drain at exit can wait for them. */
static int supervisors;
static pthread_mutex_t supervisors_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t supervisors_done = PTHREAD_COND_INITIALIZER;

/* A new record for KEY, with one reference (its supervisor's); NULL when out of memory. */
struct background *background_new(const char *key)
{
    struct background *bg = calloc(1, sizeof *bg);
    if (!bg)
        return NULL;
    bg->key = strdup(key);
    bg->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!bg->key || bg->wake_fd < 0) {
        if (bg->wake_fd >= 0)
            close(bg->wake_fd);
        free(bg->key);
        free(bg);
        return NULL;
    }
    bg->refs = 1;
    pthread_mutex_init(&bg->lock, NULL);
    pthread_cond_init(&bg->changed, NULL);
    return bg;
}

/* Drops one reference; the last one frees the record. */
void background_put(struct background *bg)
{
    if (!bg || __atomic_sub_fetch(&bg->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int s = 0; s < 2; s++)
        held_free(&bg->streams[s]);
    json_decref(bg->end);
    close(bg->wake_fd);
    pthread_mutex_destroy(&bg->lock);
    pthread_cond_destroy(&bg->changed);
    free(bg->key);
    free(bg);
}

/* Whether an ended record has outlived --background-ttl (caller holds ws->lock): fetched or
 * not, a client that went away without DELETE must not hold the daemon's memory for good. */
static bool record_expired(struct background *bg, double now)
{
    pthread_mutex_lock(&bg->lock);
    bool expired = bg->end && now - bg->ended_at > g_config.background_ttl_ms;
    pthread_mutex_unlock(&bg->lock);
    return expired;
}

/* Unlinks the records that match (all when EXPIRED_ONLY is false) and drops the list's
 * references (caller holds ws->lock). An expired one is logged: its client never came back
 * for it (or never said DELETE). */
static void records_drop(struct workspace *ws, bool expired_only)
{
    double now = monotonic_ms();
    for (struct background **p = &ws->backgrounds; *p;) {
        struct background *bg = *p;
        if (!expired_only || record_expired(bg, now)) {
            if (expired_only)
                log_event("workspace %s: background exec %s forgotten %.0f s after its end "
                          "(--background-ttl)", ws->id, bg->key, (now - bg->ended_at) / 1000);
            *p = bg->next;
            background_put(bg);
        } else {
            p = &bg->next;
        }
    }
}

/* Adds BG to the workspace's records (caller holds ws->lock); the list takes a reference. */
void background_link_locked(struct workspace *ws, struct background *bg)
{
    records_drop(ws, true);
    __atomic_add_fetch(&bg->refs, 1, __ATOMIC_ACQ_REL);
    bg->next = ws->backgrounds;
    ws->backgrounds = bg;
}

/* Removes BG from the workspace's records, if there, and drops the list's reference. */
void background_unlink(struct workspace *ws, struct background *bg)
{
    pthread_mutex_lock(&ws->lock);
    for (struct background **p = &ws->backgrounds; *p; p = &(*p)->next)
        if (*p == bg) {
            *p = bg->next;
            background_put(bg);
            break;
        }
    pthread_mutex_unlock(&ws->lock);
}

/* The workspace's records, ended ones not yet forgotten included (caller holds ws->lock). */
size_t background_count_locked(struct workspace *ws)
{
    size_t n = 0;
    for (struct background *bg = ws->backgrounds; bg; bg = bg->next)
        n++;
    return n;
}

/* Whether KEY names a record not yet forgotten (caller holds ws->lock). */
bool background_key_taken_locked(struct workspace *ws, const char *key)
{
    for (struct background *bg = ws->backgrounds; bg; bg = bg->next)
        if (strcmp(bg->key, key) == 0)
            return true;
    return false;
}

/* Release and hibernation (all) or the periodic sweep (expired ones): forgets records. */
void background_drop(struct workspace *ws, bool expired_only)
{
    pthread_mutex_lock(&ws->lock);
    records_drop(ws, expired_only);
    pthread_mutex_unlock(&ws->lock);
}

/* The record named KEY with a reference of the caller's, or NULL with exec_not_found. */
static struct background *record_get(struct workspace *ws, const char *key,
                                     struct api_error *err)
{
    struct background *found = NULL;
    pthread_mutex_lock(&ws->lock);
    records_drop(ws, true);
    for (struct background *bg = ws->backgrounds; bg && !found; bg = bg->next)
        if (strcmp(bg->key, key) == 0) {
            found = bg;
            __atomic_add_fetch(&bg->refs, 1, __ATOMIC_ACQ_REL);
        }
    pthread_mutex_unlock(&ws->lock);
    if (!found)
        api_error_set(err, 404, "exec_not_found", "no background exec with key \"%s\"", key);
    return found;
}

/* ---- what the supervisor calls ---- */

/* The descriptor the supervisor polls to learn that bytes were acknowledged. */
int background_wake_fd(struct background *bg)
{
    return bg->wake_fd;
}

/* Clears the wake-up after the supervisor saw it. */
void background_wake_clear(struct background *bg)
{
    uint64_t count;
    if (read(bg->wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
        log_event("background exec %s: cannot read its wake-up: %s", bg->key, strerror(errno));
}

/* The size a buffer holding LEN bytes grows to for NEED more (doubling from BUFFER_FLOOR). */
static size_t held_grown_size(const struct held *h, size_t need)
{
    size_t size = h->alloc ? h->alloc : BUFFER_FLOOR;
    while (size < h->len + need)
        size *= 2;
    return size;
}

/* Whether STREAM may take NEED more bytes: within the cap, in its buffer's free room or by
 * growing it within --background-buffer-total (caller holds bg->lock). */
static bool held_has_room(const struct held *h, size_t need)
{
    if (h->len >= g_config.background_buffer_bytes)
        return false;
    if (h->len + need <= h->alloc)
        return true;
    size_t size = held_grown_size(h, need);
    return size <= BUFFER_FLOOR || __atomic_load_n(&buffers_allocated, __ATOMIC_ACQUIRE) +
                                           (size - h->alloc) <= g_config.background_buffer_total;
}

/* Whether STREAM's pipe may be read: under the cap, with room for a byte. */
bool background_room(struct background *bg, int stream)
{
    pthread_mutex_lock(&bg->lock);
    bool room = held_has_room(&bg->streams[stream], 1);
    pthread_mutex_unlock(&bg->lock);
    return room;
}

/* Makes room for up to *NEED more bytes after the held ones: moves them to the front, then
 * grows the buffer if the total allows (always once ENDED); *NEED becomes what fits. False
 * when nothing fits (the total is reached, or out of memory): the pipe waits, nothing lost. */
static bool held_reserve(struct held *h, size_t *need, bool ended)
{
    if (h->start > 0 && h->start + h->len + *need > h->alloc) {
        memmove(h->buf, h->buf + h->start, h->len);
        h->start = 0;
    }
    if (h->len + *need <= h->alloc)
        return true;
    size_t size = held_grown_size(h, *need);
    unsigned char *grown = NULL;
    if (buffers_take(size - h->alloc, ended || size <= BUFFER_FLOOR)) {
        grown = realloc(h->buf, size);
        if (!grown)
            buffers_give(size - h->alloc);
    }
    if (!grown) {
        *need = h->alloc - h->len;   /* what the buffer holds already */
        return *need > 0;
    }
    h->buf = grown;
    h->alloc = size;
    return true;
}

/*
 * Reads FD (non-blocking) into STREAM's held bytes, as far as the cap and the total allow;
 * once the exec ENDED, up to END_DRAIN_MAX past the cap (what its processes wrote before they
 * died, bounded by a pipe's capacity). False at the pipe's end; true when it may hold more
 * later.
 */
bool background_read(struct background *bg, int stream, int fd, bool ended)
{
    size_t cap = g_config.background_buffer_bytes + (ended ? END_DRAIN_MAX : 0);
    ssize_t n = 1;
    pthread_mutex_lock(&bg->lock);
    struct held *h = &bg->streams[stream];
    while (n > 0 && h->len < cap) {
        size_t want = cap - h->len < 65536 ? cap - h->len : 65536;
        if (!held_reserve(h, &want, ended))
            break;
        n = read(fd, h->buf + h->start + h->len, want);
        if (n > 0) {
            h->len += (size_t)n;
            pthread_cond_broadcast(&bg->changed);
        }
    }
    pthread_mutex_unlock(&bg->lock);
    return n != 0;
}

/* The exec ended: END (taken over) holds its end fields or {"error": ...}; waiters wake. */
void background_end(struct background *bg, json_t *end)
{
    pthread_mutex_lock(&bg->lock);
    bg->end = end;
    bg->ended_at = monotonic_ms();
    pthread_cond_broadcast(&bg->changed);
    pthread_mutex_unlock(&bg->lock);
}

/* A supervisor thread starts or ends (the drain at exit waits for the ends). */
void background_supervisor_count(int delta)
{
    pthread_mutex_lock(&supervisors_lock);
    supervisors += delta;
    if (supervisors == 0)
        pthread_cond_broadcast(&supervisors_done);
    pthread_mutex_unlock(&supervisors_lock);
}

/* Waits until no supervisor runs (after every background exec was killed). */
void background_wait_supervisors(void)
{
    pthread_mutex_lock(&supervisors_lock);
    while (supervisors > 0)
        pthread_cond_wait(&supervisors_done, &supervisors_lock);
    pthread_mutex_unlock(&supervisors_lock);
}

/* ---- the requests ---- */

/* Acknowledges STREAM's bytes before FROM (drops them); true when some were dropped. */
static bool held_acknowledge(struct held *h, uint64_t from)
{
    if (from <= h->base)
        return false;
    size_t drop = from - h->base < h->len ? (size_t)(from - h->base) : h->len;
    h->start += drop;
    h->len -= drop;
    h->base += drop;
    if (h->len == 0)
        held_free(h);   /* a quiet stream holds no memory */
    return drop > 0;
}

/* Whether the client asking from these offsets has something to take (caller holds bg->lock). */
static bool output_ready(struct background *bg, const struct output_query *q)
{
    return bg->end || bg->streams[0].base + bg->streams[0].len > q->from[0] ||
           bg->streams[1].base + bg->streams[1].len > q->from[1];
}

/* The answer's document and raw bytes from the held bytes at the query's offsets (caller
 * holds bg->lock). NULL with ERR when out of memory. */
static json_t *output_answer(struct background *bg, const struct output_query *q,
                             struct exec_output *raw, struct api_error *err)
{
    static const char *names[2][4] = {{"stdout_from", "stdout_kept", "stdout_bytes", NULL},
                                      {"stderr_from", "stderr_kept", "stderr_bytes", NULL}};
    uint64_t from[2];
    size_t kept[2];
    for (int s = 0; s < 2; s++) {
        struct held *h = &bg->streams[s];
        from[s] = q->from[s] > h->base ? q->from[s] : h->base;
        uint64_t left = h->base + h->len - from[s];
        kept[s] = left < q->max_bytes ? (size_t)left : q->max_bytes;
    }
    json_t *doc = json_object();
    raw->bytes = malloc(kept[0] + kept[1] + 1);
    if (!doc || !raw->bytes) {
        json_decref(doc);
        free(raw->bytes);
        raw->bytes = NULL;
        api_error_from_errno(err, ENOMEM, "cannot answer the output");
        return NULL;
    }
    raw->len = 0;
    json_object_set_new(doc, "running", json_boolean(bg->end == NULL));
    for (int s = 0; s < 2; s++) {
        struct held *h = &bg->streams[s];
        if (kept[s] > 0)   /* a stream that never held a byte has no buffer */
            memcpy(raw->bytes + raw->len, h->buf + h->start + (from[s] - h->base), kept[s]);
        raw->len += kept[s];
        json_object_set_new(doc, names[s][0], json_integer((json_int_t)from[s]));
        json_object_set_new(doc, names[s][1], json_integer((json_int_t)kept[s]));
        json_object_set_new(doc, names[s][2], json_integer((json_int_t)(h->base + h->len)));
    }
    if (bg->end)
        json_object_update_missing(doc, bg->end);
    return doc;
}

/*
 * GET /v1/workspaces/{id}/execs/{key}/output: acknowledges the bytes before the query's ack
 * offsets, waits up to its wait_ms for bytes at or past its from offsets or for the end, and
 * answers the document (with the raw bytes in RAW, stdout then stderr, framed like output
 * "tail").
 */
json_t *background_output(struct workspace *ws, const char *key, const struct output_query *q,
                          struct exec_output *raw, struct api_error *err)
{
    struct background *bg = record_get(ws, key, err);
    json_t *doc = NULL;
    if (!bg)
        return NULL;
    pthread_mutex_lock(&bg->lock);
    for (int s = 0; s < 2; s++)
        if (q->from[s] > bg->streams[s].base + bg->streams[s].len) {
            api_error_set(err, 400, "bad_offset", "%s_from %llu is past the %llu bytes written "
                          "so far", s ? "stderr" : "stdout", (unsigned long long)q->from[s],
                          (unsigned long long)(bg->streams[s].base + bg->streams[s].len));
            pthread_mutex_unlock(&bg->lock);
            background_put(bg);
            return NULL;
        }
    bool dropped = held_acknowledge(&bg->streams[0], q->ack[0]);
    dropped = held_acknowledge(&bg->streams[1], q->ack[1]) || dropped;
    if (dropped && write(bg->wake_fd, &(uint64_t){1}, sizeof(uint64_t)) < 0)
        log_event("background exec %s: cannot wake its supervisor: %s", key, strerror(errno));
    struct timespec until = realtime_in_ms((long)q->wait_ms);
    while (!output_ready(bg, q) && !__atomic_load_n(&g_shutting_down, __ATOMIC_SEQ_CST) &&
           pthread_cond_timedwait(&bg->changed, &bg->lock, &until) != ETIMEDOUT)
        ;
    doc = output_answer(bg, q, raw, err);
    pthread_mutex_unlock(&bg->lock);
    background_put(bg);
    return doc;
}

/* DELETE /v1/workspaces/{id}/execs/{key}: forgets an ended record; exec_running while the
 * command runs. */
bool background_forget(struct workspace *ws, const char *key, struct api_error *err)
{
    struct background *bg = record_get(ws, key, err);
    if (!bg)
        return false;
    pthread_mutex_lock(&bg->lock);
    bool running = bg->end == NULL;
    pthread_mutex_unlock(&bg->lock);
    if (running)
        api_error_set(err, 409, "exec_running", "background exec \"%s\" is still running; kill "
                      "it first", key);
    else
        background_unlink(ws, bg);
    background_put(bg);
    return !running;
}
