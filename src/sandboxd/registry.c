/*
 * registry.c - the registry of workspace objects (registry.h): the list under registry_lock,
 * reference counts, the objects' making and freeing, and the admission of running workspaces
 * by descriptors. It starts and stops nothing: workspace.c and standby.c do, and workspace.c
 * hands in (registry_on_free) what a freed object's higher layers release.
 */
#include "registry.h"
#include "log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct workspace *registry;

/* What workspace_free releases first, of layers above this one (background records, the
 * holder's descriptors): set once at start by workspaces_init. */
static void (*free_release)(struct workspace *ws);

/*
 * Admission by descriptors: a running workspace keeps up to FDS_PER_WORKSPACE open (its user
 * and network namespaces, root, exec agent's channel, 4 cgroups, 2 memory control files, the
 * egress listener); a quarter of the open-files limit
 * stays free for requests, exec pipes and proxied connections. Past running_max a create or
 * wake answers out_of_resources before anything is made, instead of failing half way.
 */
#define FDS_PER_WORKSPACE 11
static int running_count;   /* workspaces holding descriptors; under registry_lock */
static int running_max;     /* set once at start */

/* Takes registry_lock: the list, every refcount and running_count. */
void registry_lock(void)
{
    pthread_mutex_lock(&registry_mutex);
}

/* Gives registry_lock back. */
void registry_unlock(void)
{
    pthread_mutex_unlock(&registry_mutex);
}

/* Reserves the descriptors of one more running workspace; out_of_resources at the limit. */
bool registry_running_take(struct api_error *err)
{
    registry_lock();
    bool ok = running_count < running_max;
    if (ok)
        running_count++;
    registry_unlock();
    if (!ok)
        api_error_set(err, 503, "out_of_resources",
                      "%d workspaces are running, the most this daemon's open-files limit "
                      "allows; release some or raise the limit", running_max);
    return ok;
}

/* Gives a reservation back (start failed, or the workspace stopped). */
void registry_running_give(void)
{
    registry_lock();
    running_count--;
    registry_unlock();
}

/* Start-up: a re-adopted running workspace counts, even past the limit. */
void registry_running_adopted(void)
{
    registry_lock();
    running_count++;
    registry_unlock();
}

/* Whether STANDBYS standby holders fit beside the running workspaces in the descriptor budget
 * (standby.c starts one only then: a standby never takes a real workspace's room). */
bool workspace_running_room(int standbys)
{
    registry_lock();
    bool room = running_count + standbys < running_max;
    registry_unlock();
    return room;
}

/* Sets running_max from the open-files limit (after main raised it). */
void registry_running_init(void)
{
    struct rlimit lim;
    rlim_t files = getrlimit(RLIMIT_NOFILE, &lim) == 0 ? lim.rlim_cur : 1024;
    running_max = (int)((files / 4 * 3) / FDS_PER_WORKSPACE);
    log_event("at most %d running workspaces (open-files limit %llu)", running_max,
              (unsigned long long)files);
}

/* A fresh, unregistered workspace object with every descriptor closed (also a standby's,
 * standby.c); NULL when out of memory. */
struct workspace *workspace_new(const char *id)
{
    struct workspace *ws = calloc(1, sizeof *ws);
    json_t *labels = json_object();
    if (!ws || !labels) {
        free(ws);
        json_decref(labels);
        return NULL;
    }
    snprintf(ws->id, sizeof ws->id, "%s", id);
    ws->tier = tier_by_name("standard");
    snprintf(ws->network, sizeof ws->network, "none");
    ws->labels = labels;
    ws->created_at = time(NULL);
    ws->state = WS_STOPPING;   /* not usable until started or loaded */
    ws->user_ns_fd = ws->net_ns_fd = -1;
    ws->root_fd = -1;
    ws->agent_fd = -1;
    for (int f = 0; f < CG_FILES; f++)
        ws->cgroup_fds[f] = -1;
    pthread_mutex_init(&ws->lock, NULL);
    pthread_mutex_init(&ws->lifecycle, NULL);
    pthread_cond_init(&ws->execs_done, NULL);
    return ws;
}

/* Sets what workspace_free releases of the layers above the registry (once, at start). */
void registry_on_free(void (*release)(struct workspace *ws))
{
    free_release = release;
}

/* Frees a workspace object once nothing references it. */
void workspace_free(struct workspace *ws)
{
    if (free_release)
        free_release(ws);
    cgroup_close_fds(ws->cgroup_fds);
    json_decref(ws->labels);
    json_decref(ws->allow);
    pthread_mutex_destroy(&ws->lock);
    pthread_mutex_destroy(&ws->lifecycle);
    pthread_cond_destroy(&ws->execs_done);
    free(ws);
}

/* The head of the registry list, followed through ->next (caller holds registry_lock, or
 * runs at start-up before the listeners). */
struct workspace *registry_first(void)
{
    return registry;
}

/* Registry lookup (caller holds registry_lock). */
struct workspace *registry_find(const char *id)
{
    for (struct workspace *ws = registry; ws; ws = ws->next)
        if (strcmp(ws->id, id) == 0)
            return ws;
    return NULL;
}

/* Links WS at the head of the registry (caller holds registry_lock and has set the
 * registry's reference). */
void registry_insert(struct workspace *ws)
{
    ws->next = registry;
    registry = ws;
}

/* Unlinks WS from the registry and drops the registry's reference. The caller holds
 * WS's lifecycle lock and a reference of its own, so an acquire waiting for the lifecycle
 * lock sees "removed" and starts over with a new object. */
void registry_remove(struct workspace *ws)
{
    registry_lock();
    for (struct workspace **p = &registry; *p; p = &(*p)->next)
        if (*p == ws) {
            *p = ws->next;
            break;
        }
    pthread_mutex_lock(&ws->lock);
    ws->removed = true;
    pthread_mutex_unlock(&ws->lock);
    ws->refcount--;   /* never the last: the caller holds one */
    registry_unlock();
}

/* Returns a referenced workspace by id, or NULL with bad_workspace_id/workspace_not_found. */
struct workspace *workspace_get(const char *id, struct api_error *err)
{
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_workspace_id", "workspace id is not valid");
        return NULL;
    }
    registry_lock();
    struct workspace *ws = registry_find(id);
    if (ws)
        ws->refcount++;
    registry_unlock();
    if (!ws)
        api_error_set(err, 404, "workspace_not_found", "no workspace with id \"%s\"", id);
    return ws;
}

/* Another reference to WS, which the caller holds one of (a background exec's supervisor). */
void workspace_hold(struct workspace *ws)
{
    registry_lock();
    ws->refcount++;
    registry_unlock();
}

/* Drops one reference; the last one frees the object. */
void workspace_put(struct workspace *ws)
{
    registry_lock();
    bool last = --ws->refcount == 0;
    registry_unlock();
    if (last)
        workspace_free(ws);
}

/* The state of WS as another thread sees it (the lifecycle holder may read ws->state). */
enum ws_state workspace_state(struct workspace *ws)
{
    pthread_mutex_lock(&ws->lock);
    enum ws_state state = ws->state;
    pthread_mutex_unlock(&ws->lock);
    return state;
}

/* Registered workspaces (running or hibernated) standing on snapshot SNAPSHOT_ID: a snapshot
 * is deleted only when none is. */
int workspaces_on_snapshot(const char *snapshot_id)
{
    int count = 0;
    registry_lock();
    for (struct workspace *ws = registry; ws; ws = ws->next)
        count += strcmp(ws->snapshot, snapshot_id) == 0;
    registry_unlock();
    return count;
}
