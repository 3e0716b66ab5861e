/*
 * workspace.c - workspace lifecycle (acquire = create or wake, release = destroy or
 * hibernate) and persistence; the objects and their registry are registry.c's.
 *
 * On disk: <state>/workspaces/<id>/meta.json (one small JSON per workspace, replaced
 * atomically) and <state>/workspaces/<id>/files (the workspace's /workspace, owned by the
 * sandbox user; for a workspace created from a snapshot, the overlay's upper layer, with its
 * work directory beside it: snapshot.c). A restarted daemon reloads every meta.json and
 * re-adopts live holders, or starts a new holder over the same files when the old one is
 * gone.
 */
#include "workspace.h"
#include "background.h"
#include "capabilities.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "exec.h"
#include "hostsetup.h"
#include "json.h"
#include "layout.h"
#include "log.h"
#include "registry.h"
#include "sandbox.h"
#include "snapshot.h"
#include "standby.h"
#include "tiers.h"
#include "util.h"
#include "workspace_dirs.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Gives a reservation back (start failed, or the workspace stopped), and tells the standby
 * pool that a running workspace's room is free. */
static void running_slot_give(void)
{
    registry_running_give();
    standby_room_freed();
}

/* What a freed workspace object releases of the layers above the registry (registry_on_free):
 * its background records and the holder's descriptors. */
static void workspace_release_layers(struct workspace *ws)
{
    background_drop(ws, false);
    sandbox_close_fds(ws);
}

/* ISO 8601 UTC time for the API. */
static void format_time(time_t t, char *out, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The list-entry object of a workspace. Its labels and allow list are copies, never references:
 * the answer is freed by its request's thread, maybe after a release on another thread freed
 * the workspace, and jansson's reference counts do not order one thread's last use before
 * another's free (ThreadSanitizer saw it in 12-stress.t). */
json_t *workspace_describe(struct workspace *ws)
{
    char created[32];
    format_time(ws->created_at, created, sizeof created);
    json_t *doc = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "id", ws->id, "state",
                            workspace_state(ws) == WS_RUNNING ? "running" : "hibernated", "size",
                            ws->tier->name, "network", ws->network, "created_at", created,
                            "labels", json_deep_copy(ws->labels));
    if (doc && ws->allow)
        json_object_set_new(doc, "allow", json_deep_copy(ws->allow));
    if (doc && ws->snapshot[0])
        json_object_set_new(doc, "snapshot", json_string(ws->snapshot));
    return doc;
}

/* Writes meta.json for WS (atomic replace); ERR (may be NULL) says why it could not. The
 * caller holds WS's lifecycle lock. Not synced: it survives any crash of the daemon, and an
 * fsync on the workspaces' own filesystem (a loop-mounted image) cost a new workspace about
 * 1.7 ms. A host that crashes within seconds of a workspace's creation may lose meta.json as it
 * loses the workspace's last file writes: the daemon then removes the directory at start and
 * the reaper's sweep finds the workspace lost, rather than the run resuming on files that may
 * lack their last writes. */
static bool workspace_persist(struct workspace *ws, struct api_error *err)
{
    char *dir = workspace_dir(ws->id);
    char *path = xasprintf("%s/meta.json", dir);
    free(dir);
    json_t *meta = json_pack("{s:s,s:s,s:s,s:O,s:I,s:s,s:I,s:I}", "id", ws->id, "size",
                             ws->tier->name, "network", ws->network, "labels", ws->labels,
                             "created_at", (json_int_t)ws->created_at, "state",
                             ws->state == WS_RUNNING ? "running" : "hibernated", "holder_pid",
                             (json_int_t)ws->holder_pid, "holder_start",
                             (json_int_t)ws->holder_start);
    if (meta && ws->allow)
        json_object_set(meta, "allow", ws->allow);
    if (meta && ws->snapshot[0])
        json_object_set_new(meta, "snapshot", json_string(ws->snapshot));
    char *text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    errno = ENOMEM;
    bool ok = text && write_file_atomic(path, text, strlen(text), 0600, false);
    if (!ok) {
        int error = errno;
        log_event("workspace %s: cannot persist state: %s", ws->id, strerror(error));
        if (err)
            api_error_from_errno(err, error, "cannot persist the workspace's state");
    }
    free(text);
    json_decref(meta);
    free(path);
    return ok;
}

/* Starts the holder of WS and puts its snapshot (if any) under /workspace; on failure no
 * holder is left running. */
static bool workspace_start_holder(struct workspace *ws, struct api_error *err)
{
    if (!sandbox_start(ws, err))
        return false;
    if (snapshot_mount(ws, err))
        return true;
    sandbox_stop(ws);
    return false;
}

/* WS's holder runs: execs may come. */
static void workspace_mark_running(struct workspace *ws)
{
    pthread_mutex_lock(&ws->lock);
    ws->state = WS_RUNNING;
    ws->exec_slots_known = 0;   /* the groups may be new: their counters are read again */
    pthread_mutex_unlock(&ws->lock);
}

/* Starts cgroups and holder for WS (new or hibernated); on failure nothing is left running. */
static bool workspace_start(struct workspace *ws, struct api_error *err)
{
    if (!registry_running_take(err))
        return false;
    if (!cgroup_workspace_create(ws->id, ws->tier, ws->cgroup_fds)) {
        api_error_set(err, 500, "spawn_failed", "cannot create the workspace's cgroups");
        running_slot_give();
        return false;
    }
    if (!workspace_start_holder(ws, err)) {
        cgroup_close_fds(ws->cgroup_fds);
        cgroup_workspace_remove(ws->id);
        running_slot_give();
        return false;
    }
    workspace_mark_running(ws);
    return true;
}

/* A new workspace WS takes a standby holder (standby.c) under a running slot of its own;
 * false, with nothing taken, when there is none or it cannot (at the running-workspaces
 * limit the normal start answers out_of_resources). */
static bool workspace_start_from_standby(struct workspace *ws)
{
    struct api_error ignored = {0};
    if (!registry_running_take(&ignored))
        return false;
    if (!standby_adopt(ws)) {
        running_slot_give();
        return false;
    }
    workspace_mark_running(ws);
    return true;
}

/* Stops every process of WS: no new execs, running ones killed, holder killed, cgroups gone.
 * Files stay. */
static void workspace_stop(struct workspace *ws)
{
    bool was_running = ws->state == WS_RUNNING;   /* it holds a slot */
    pthread_mutex_lock(&ws->lock);
    ws->state = WS_STOPPING;
    pthread_mutex_unlock(&ws->lock);
    exec_kill_all(ws, false);
    /* Execs unregister once their answers are in. Only then may the descriptors they use
     * (the agent's channel) be closed: a closed number can be reused by another workspace's. */
    pthread_mutex_lock(&ws->lock);
    while (ws->execs) {
        struct timespec until = realtime_in_ms(10000);
        if (pthread_cond_timedwait(&ws->execs_done, &ws->lock, &until) != 0 && ws->execs)
            log_event("workspace %s: still waiting for killed execs to end", ws->id);
    }
    pthread_mutex_unlock(&ws->lock);
    background_drop(ws, false);   /* every background exec has ended: its record goes */
    sandbox_stop(ws);
    cgroup_close_fds(ws->cgroup_fds);
    cgroup_workspace_remove(ws->id);
    pthread_mutex_lock(&ws->lock);
    ws->state = WS_HIBERNATED;
    pthread_mutex_unlock(&ws->lock);
    if (was_running)
        running_slot_give();
}

/* Network settings of an acquire body: "network" none|open|allowlist and, for allowlist,
 * "allow" (domain patterns). Open and allowlist need the egress_control capability. */
static bool parse_network(json_t *body, const char **network, json_t **allow,
                          struct api_error *err)
{
    *network = "none";
    *allow = NULL;
    if (body && !json_get_string(body, "network", network, err))
        return false;
    if (strcmp(*network, "none") != 0 && strcmp(*network, "open") != 0 &&
        strcmp(*network, "allowlist") != 0) {
        api_error_set(err, 400, "bad_request", "network must be none, open or allowlist");
        return false;
    }
    if (strcmp(*network, "none") != 0 && !g_caps.egress_control) {
        api_error_set(err, 400, "egress_unsupported",
                      "network \"%s\" cannot be enforced here (egress_control is false)", *network);
        return false;
    }
    json_t *list = body ? json_object_get(body, "allow") : NULL;
    if (list && strcmp(*network, "allowlist") != 0) {
        api_error_set(err, 400, "bad_request", "field \"allow\" needs network \"allowlist\"");
        return false;
    }
    if (strcmp(*network, "allowlist") != 0)
        return true;
    size_t i;
    json_t *p;
    if (list && (!json_is_array(list) || json_array_size(list) > 4096)) {
        api_error_set(err, 400, "bad_request", "field \"allow\" must be an array of domains");
        return false;
    }
    json_array_foreach(list, i, p)
        if (!json_is_string(p) || !egress_pattern_valid(json_string_value(p))) {
            api_error_set(err, 400, "bad_domain",
                          "allow[%zu] is not a domain (lower case, \"*.\" only as first label)", i);
            return false;
        }
    *allow = list ? list : json_array();
    if (!list)
        return true;   /* the fresh empty array is already ours */
    json_incref(*allow);
    return true;
}

/* Parses the acquire body into WS's settings (used only when the workspace is created). */
static bool parse_acquire_body(json_t *body, const struct size_tier **tier, json_t **labels,
                               const char **snapshot, struct api_error *err)
{
    const char *size = "standard";
    *labels = NULL;
    *snapshot = NULL;
    if (body && (!json_get_string(body, "size", &size, err) ||
                 !json_get_string(body, "snapshot", snapshot, err) ||
                 !json_get_object(body, "labels", labels, err) ||
                 (*labels && !json_string_map_valid(*labels, "labels", err))))
        return false;
    *tier = tier_by_name(size);
    if (!*tier) {
        api_error_set(err, 400, "unknown_tier", "size \"%s\" is not a tier", size);
        return false;
    }
    return true;
}

/* Creation-time settings of an acquire: a later acquire never changes them. */
struct ws_settings {
    const struct size_tier *tier;
    const char *network;
    json_t *allow;
    json_t *labels;
    const char *snapshot;   /* NULL: an empty /workspace */
};

/* A new workspace object carrying SETTINGS, complete before any other thread can see it
 * (these fields are never written again); NULL when out of memory. */
static struct workspace *workspace_new_with(const char *id, const struct ws_settings *settings)
{
    struct workspace *ws = workspace_new(id);
    if (!ws)
        return NULL;
    ws->tier = settings->tier;
    snprintf(ws->network, sizeof ws->network, "%s", settings->network);
    ws->allow = json_incref(settings->allow);
    if (settings->snapshot)
        snprintf(ws->snapshot, sizeof ws->snapshot, "%s", settings->snapshot);
    if (settings->labels && json_object_update(ws->labels, settings->labels) != 0) {
        workspace_free(ws);
        return NULL;
    }
    return ws;
}

/* Finds or registers the workspace ID and returns it referenced. A new object is "fresh": the
 * first acquire to take its lifecycle lock makes it, which need not be the one that
 * registered it. NULL only when a new object cannot be allocated. */
static struct workspace *find_or_register(const char *id, const struct ws_settings *settings)
{
    registry_lock();
    struct workspace *ws = registry_find(id);
    if (!ws && (ws = workspace_new_with(id, settings))) {
        ws->fresh = true;
        ws->refcount = 1;   /* the registry's */
        registry_insert(ws);
    }
    if (ws)
        ws->refcount++;
    registry_unlock();
    return ws;
}

/* find_or_register for an acquire naming a snapshot: the snapshot must be ready, and stays
 * so (a delete waits for snap_lock, then sees the workspace standing on it). NULL with ERR
 * set when it cannot be used, NULL without when out of memory. */
static struct workspace *register_on_snapshot(const char *id, const struct ws_settings *settings,
                                              struct api_error *err)
{
    if (!settings->snapshot)
        return find_or_register(id, settings);
    snapshot_lock();
    struct workspace *ws = snapshot_usable(settings->snapshot, err)
                               ? find_or_register(id, settings) : NULL;
    snapshot_unlock();
    return ws;
}

/* PUT /v1/workspaces/{id}: create or wake, idempotent. */
json_t *workspace_acquire(const char *id, json_t *body, struct api_error *err)
{
    struct ws_settings settings;
    json_t *resp = NULL;
    bool woke = false;
    if (!workspace_id_valid(id)) {
        api_error_set(err, 400, "bad_workspace_id", "workspace id is not valid");
        return NULL;
    }
    if (!parse_acquire_body(body, &settings.tier, &settings.labels, &settings.snapshot, err) ||
        !parse_network(body, &settings.network, &settings.allow, err))
        return NULL;
    struct workspace *ws = register_on_snapshot(id, &settings, err);
    json_decref(settings.allow);
    if (!ws && err->http_status)
        return NULL;
    if (!ws) {
        api_error_from_errno(err, ENOMEM, "cannot register the workspace");
        return NULL;
    }
    pthread_mutex_lock(&ws->lifecycle);
    if (ws->removed) {   /* released while we waited: start over */
        pthread_mutex_unlock(&ws->lifecycle);
        workspace_put(ws);
        return workspace_acquire(id, body, err);
    }
    bool created = ws->fresh, ok = true;
    if (created && host_disk_refused()) {
        char buf[1024];
        struct passwd pw;
        bool known = user_lookup(NULL, geteuid(), &pw, buf, sizeof buf);
        api_error_set(err, 507, "disk_unbounded",
                      "workspace files would share the filesystem of %s and could fill it; "
                      "give them a filesystem of their own (as root: mesh-sandboxd --setup-host "
                      "%s --state-dir %s --disk-bytes N, see docs/sandboxd.md)",
                      g_config.protect_path, known ? pw.pw_name : "USER", g_config.state_dir);
        ok = false;
    } else if (created && workspace_start_from_standby(ws)) {
        ok = workspace_persist(ws, err);
    } else if (created && !workspace_make_dirs(ws)) {
        if (errno == ENOSPC)
            api_error_set(err, 507, "disk_full", "the workspaces' filesystem is full; release "
                          "workspaces or give it more room (docs/sandboxd.md)");
        else if (errno == EDQUOT)
            api_error_set(err, 507, "disk_quota_slots", "every disk quota slot of the %s tier "
                          "is taken; release workspaces, or run mesh-sandboxd --setup-host "
                          "again with a larger --quota-slots (docs/sandboxd.md)",
                          ws->tier->name);
        else
            api_error_set(err, 500, "internal", "cannot create the workspace directory");
        ok = false;
    } else if (ws->state != WS_RUNNING || !holder_running(ws)) {
        if (ws->state == WS_RUNNING)
            workspace_stop(ws);   /* holder died under us: restart it over the same files */
        woke = !created;
        ok = workspace_start(ws, err) && workspace_persist(ws, err);
    }
    if (ok)
        ws->fresh = false;
    if (ok) {
        resp = workspace_describe(ws);
        json_object_set_new(resp, "created", json_boolean(created));
        json_object_set_new(resp, "woke", json_boolean(woke));
        /* what this host enforces for the workspace, so a caller learns it in one round trip */
        json_t *caps = caps_to_json();
        json_object_set(resp, "capabilities", json_object_get(caps, "capabilities"));
        json_decref(caps);
        log_event("workspace %s: acquired (%s)", ws->id,
                  created ? "created" : woke ? "woke" : "running");
    } else if (created) {
        workspace_stop(ws);
        char *dir = workspace_dir(ws->id);
        workspace_dir_remove(dir);
        free(dir);
        registry_remove(ws);
    }
    pthread_mutex_unlock(&ws->lifecycle);
    workspace_put(ws);
    return resp;
}

/* Removes a stopped workspace's files, then its directory (meta.json last, so a workspace
 * whose files could not all be removed keeps its state and stays releasable). False with
 * release_incomplete: the outcome must not say destroyed while files remain. */
static bool workspace_remove_dirs(struct workspace *ws, struct api_error *err)
{
    char *files = workspace_files_dir(ws->id);
    char *dir = workspace_dir(ws->id);
    bool ok = remove_tree(files) && workspace_dir_remove(dir);
    if (!ok) {
        int error = errno;
        log_event("workspace %s: release incomplete, could not remove %s: %s", ws->id, dir,
                  strerror(error));
        api_error_set(err, 500, "release_incomplete",
                      "the workspace's processes are gone but some of its files could not be "
                      "removed (%s); release it again to retry", strerror(error));
    }
    free(files);
    free(dir);
    return ok;
}

/* DELETE /v1/workspaces/{id}: destroy or hibernate after killing every process. */
json_t *workspace_release(const char *id, json_t *body, struct api_error *err)
{
    const char *prefer = g_config.release_default == RELEASE_HIBERNATE ? "hibernate" : "destroy";
    if (body && !json_get_string(body, "prefer", &prefer, err))
        return NULL;
    if (strcmp(prefer, "destroy") != 0 && strcmp(prefer, "hibernate") != 0) {
        api_error_set(err, 400, "bad_request", "field \"prefer\" must be destroy or hibernate");
        return NULL;
    }
    bool hibernate = strcmp(prefer, "hibernate") == 0 && g_caps.hibernate;
    struct workspace *ws = workspace_get(id, err);
    if (!ws)
        return NULL;
    pthread_mutex_lock(&ws->lifecycle);
    if (ws->removed) {
        pthread_mutex_unlock(&ws->lifecycle);
        workspace_put(ws);
        api_error_set(err, 404, "workspace_not_found", "no workspace with id \"%s\"", id);
        return NULL;
    }
    workspace_stop(ws);
    bool removed = hibernate || workspace_remove_dirs(ws, err);
    if (!removed || hibernate)
        workspace_persist(ws, NULL);
    if (removed && !hibernate)
        registry_remove(ws);
    pthread_mutex_unlock(&ws->lifecycle);
    if (!removed) {
        workspace_put(ws);
        return NULL;
    }
    log_event("workspace %s: released (%s)", id, hibernate ? "hibernated" : "destroyed");
    workspace_put(ws);
    return json_pack("{s:s,s:s}", "id", id, "outcome", hibernate ? "hibernated" : "destroyed");
}

/* GET /v1/workspaces[?label=k=v] */
json_t *workspace_list(const char *label_filter, struct api_error *err)
{
    char key[256];
    const char *value;
    if (!label_filter_parse(label_filter, key, sizeof key, &value, err))
        return NULL;
    json_t *list = json_array();
    registry_lock();
    for (struct workspace *ws = registry_first(); ws; ws = ws->next) {
        if (!labels_match(ws->labels, key, value))
            continue;
        if (workspace_state(ws) == WS_STOPPING)
            continue;   /* being created or released */
        json_array_append_new(list, workspace_describe(ws));
    }
    registry_unlock();
    return json_pack("{s:o}", "workspaces", list);
}

/* The creation-time network of a loaded workspace. Anything unexpected becomes "none"
 * (loopback only): a damaged file must never widen access. */
static void load_network(struct workspace *ws, json_t *meta)
{
    const char *network = json_string_value(json_object_get(meta, "network"));
    json_t *allow = json_object_get(meta, "allow");
    if (network && strcmp(network, "open") == 0) {
        snprintf(ws->network, sizeof ws->network, "open");
    } else if (network && strcmp(network, "allowlist") == 0 && json_is_array(allow)) {
        snprintf(ws->network, sizeof ws->network, "allowlist");
        ws->allow = json_incref(allow);
    }
}

/* Loads one meta.json into a new workspace object; NULL if unreadable. */
static struct workspace *workspace_load(const char *id)
{
    char *dir = workspace_dir(id);
    char *path = xasprintf("%s/meta.json", dir);
    json_t *meta = json_load_file(path, 0, NULL);
    free(path);
    free(dir);
    const char *size = json_string_value(json_object_get(meta, "size"));
    if (!meta || !size || !tier_by_name(size)) {
        json_decref(meta);
        return NULL;
    }
    struct workspace *ws = workspace_new(id);
    if (!ws) {
        json_decref(meta);
        return NULL;
    }
    ws->tier = tier_by_name(size);
    if (json_is_object(json_object_get(meta, "labels")))
        json_object_update(ws->labels, json_object_get(meta, "labels"));
    ws->created_at = (time_t)json_integer_value(json_object_get(meta, "created_at"));
    load_network(ws, meta);
    const char *snapshot = json_string_value(json_object_get(meta, "snapshot"));
    if (snapshot && workspace_id_valid(snapshot))
        snprintf(ws->snapshot, sizeof ws->snapshot, "%s", snapshot);
    const char *state = json_string_value(json_object_get(meta, "state"));
    ws->state = state && strcmp(state, "running") == 0 ? WS_RUNNING : WS_HIBERNATED;
    ws->holder_pid = (pid_t)json_integer_value(json_object_get(meta, "holder_pid"));
    ws->holder_start = (unsigned long long)json_integer_value(json_object_get(meta, "holder_start"));
    json_decref(meta);
    return ws;
}

/* Brings a loaded running workspace back: re-adopt its holder or start a new one. */
static void workspace_revive(struct workspace *ws)
{
    struct api_error err = {0};
    if (!cgroup_workspace_create(ws->id, ws->tier, ws->cgroup_fds)) {
        ws->state = WS_HIBERNATED;
    } else if (sandbox_adopt(ws)) {
        return;
    } else {
        if (ws->holder_pid > 0 && holder_running(ws))
            sandbox_stop(ws);
        ws->holder_pid = 0;
        if (!workspace_start_holder(ws, &err)) {
            cgroup_close_fds(ws->cgroup_fds);
            cgroup_workspace_remove(ws->id);
            ws->state = WS_HIBERNATED;
        }
    }
    if (ws->state != WS_RUNNING)
        ws->holder_pid = 0;
    workspace_persist(ws, NULL);
}

/* True when HOLDER_PID is the live holder of the registered running workspace ID (start-up,
 * before the listeners: nothing else touches the registry yet). */
static bool holds_workspace(const char *id, pid_t holder_pid)
{
    struct workspace *ws = registry_find(id);
    return ws && ws->state == WS_RUNNING && ws->holder_pid == holder_pid && holder_running(ws);
}

/* True when HOLDER_PID, whose marker names a standby, was adopted by a registered running
 * workspace: its meta.json records that pid (and start time, holder_running). A standby no
 * workspace took is a stray. */
static bool holds_adopted_standby(pid_t holder_pid)
{
    for (struct workspace *ws = registry_first(); ws; ws = ws->next)
        if (ws->state == WS_RUNNING && ws->holder_pid == holder_pid && holder_running(ws))
            return true;
    return false;
}

/* The holder check of sandbox_kill_strays: by the id in the marker, or for a standby's
 * marker by the pid alone. */
static bool holds_registered(const char *name, pid_t holder_pid)
{
    return standby_name(name) ? holds_adopted_standby(holder_pid)
                              : holds_workspace(name, holder_pid);
}

/* Start-up: a group named as a workspace the daemon does not know is a leftover (a daemon
 * killed while it created the workspace, or while it gave one a standby's groups and before
 * its state was written); removed once nothing runs in it (its stray holder was killed). */
static bool group_of_no_workspace(const char *name)
{
    if (!workspace_id_valid(name))
        return false;
    registry_lock();
    bool known = registry_find(name) != NULL;
    registry_unlock();
    return !known;
}

/* Start-up: reload every workspace from the state dir; removes directories without a valid
 * meta.json (left by a crash during creation), then kills stray holders and removes the
 * groups of no workspace. */
void workspaces_init(void)
{
    char *root = xasprintf("%s/workspaces", g_config.state_dir);
    registry_on_free(workspace_release_layers);
    registry_running_init();
    mkdir(root, 0711);
    chmod(root, 0711);
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !workspace_id_valid(e->d_name))
            continue;
        struct workspace *ws = workspace_load(e->d_name);
        if (!ws) {
            char *dir = workspace_dir(e->d_name);
            log_event("workspace %s: no valid state, removing %s", e->d_name, dir);
            workspace_dir_remove(dir);
            free(dir);
            continue;
        }
        if (ws->state == WS_RUNNING)
            workspace_revive(ws);
        if (ws->state == WS_RUNNING)
            registry_running_adopted();   /* re-adopted ones count, even past the limit */
        ws->refcount = 1;
        registry_insert(ws);
        log_event("workspace %s: loaded (%s)", ws->id,
                  ws->state == WS_RUNNING ? "running" : "hibernated");
    }
    if (d)
        closedir(d);
    free(root);
    sandbox_kill_strays(holds_registered);
    cgroup_remove_matching(group_of_no_workspace, false);
}

/* --hibernate-on-exit: after the drain, stop every running workspace (files kept) so that no
 * sandbox process outlives the daemon; the next start finds them hibernated. */
void workspaces_hibernate_all(void)
{
    for (;;) {
        struct workspace *ws = NULL;
        registry_lock();
        for (struct workspace *w = registry_first(); w && !ws; w = w->next)
            if (workspace_state(w) == WS_RUNNING) {
                ws = w;
                ws->refcount++;
            }
        registry_unlock();
        if (!ws)
            return;
        pthread_mutex_lock(&ws->lifecycle);
        workspace_stop(ws);
        workspace_persist(ws, NULL);
        pthread_mutex_unlock(&ws->lifecycle);
        log_event("workspace %s: hibernated at exit", ws->id);
        workspace_put(ws);
    }
}

/* A bounded drain at exit: ends every command in flight in every workspace now (each answers
 * "killed"), instead of waiting up to its timeout. Repeated while requests drain, so an exec
 * that started just after one pass is ended by the next. */
void workspaces_kill_execs(void)
{
    registry_lock();
    for (struct workspace *ws = registry_first(); ws; ws = ws->next)
        exec_kill_all(ws, false);
    registry_unlock();
}

/* The drain at exit: background commands cannot outlive the daemon that supervises them (the
 * agent kills an exec whose socket closes), so they end now, killed, and the drain waits for
 * their supervisors. */
void workspaces_kill_background(void)
{
    registry_lock();
    for (struct workspace *ws = registry_first(); ws; ws = ws->next)
        exec_kill_all(ws, true);
    registry_unlock();
    background_wait_supervisors();
}

/* The main thread's periodic turn: forgets background records whose end nobody fetched for
 * 10 minutes, in every workspace (a client that never comes back costs bounded memory). */
void workspaces_sweep_background(void)
{
    registry_lock();
    for (struct workspace *ws = registry_first(); ws; ws = ws->next)
        background_drop(ws, true);
    registry_unlock();
}
