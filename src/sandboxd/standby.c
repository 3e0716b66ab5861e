/*
 * standby.c - standby holders: sandboxes started ahead of demand, so that a new workspace's
 * PUT adopts one instead of waiting for bubblewrap and the exec agent.
 *
 * A standby is a complete holder of the default tier ("standard"): bwrap and its agent ready,
 * namespaces open, cgroups made with the tier's limits, its own directory under
 * <state>/workspaces and its own broker directory, all under a pool name (STANDBY_PREFIX and a
 * sequence number) that no workspace id can take: an id starts with a letter or digit and has
 * no '_'. A filler thread keeps --standby of them ready (default 1, 0 turns the pool off; the
 * single-workspace mode keeps none). A new workspace of the same tier takes one (standby_adopt):
 * its cgroups and directories are renamed to the workspace's (the sandbox's bind mounts follow
 * the directories, the tasks follow their groups), then the workspace's snapshot and egress
 * policy are put in place as after a holder start. Each standby is taken under pool_lock, by
 * one request only; the filler then starts a replacement, off every request's path.
 *
 * Standbys are not workspaces: they take no running slot (adoption does, as a start would) and
 * the filler starts one only while the running workspaces leave room for it, so a standby never
 * refuses a real workspace. A daemon that stops kills them; one that starts kills what a
 * previous run left (sandbox_kill_strays, by their marker) and removes their directories and
 * cgroups. An adopted holder keeps its standby marker; a restarted daemon recognises it by the
 * holder pid its workspace's meta.json records (workspace.c, holds_workspace).
 *
 * Lock: pool_lock guards the ready list, the filler's state and its condition; it is taken
 * alone, never with another lock of the daemon.
 */
#include "standby.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "hostsetup.h"
#include "json.h"
#include "layout.h"
#include "log.h"
#include "registry.h"
#include "sandbox.h"
#include "snapshot.h"
#include "tiers.h"
#include "util.h"
#include "workspace_dirs.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STANDBY_MAX 64

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static struct workspace *pool_ready[STANDBY_MAX];   /* ready standbys, under pool_lock */
static int pool_count;                              /* under pool_lock */
static bool pool_stopping;                          /* under pool_lock */
static unsigned long pool_room_events;              /* workspaces stopped; under pool_lock */
static unsigned long pool_seq;                      /* the filler's alone */
static int pool_target;                             /* set once at start */
static bool filler_started;
static pthread_t filler;

/* <broker-dir>/<name>, or NULL without a broker. */
static char *broker_dir_of(const char *name)
{
    return g_config.broker_dir ? xasprintf("%s/%s", g_config.broker_dir, name) : NULL;
}

/* Removes what a standby named NAME has on disk: its directory and its broker directory
 * (empty: the broker listens only in a workspace's). */
static void standby_remove_dirs(const char *name)
{
    char *dir = workspace_dir(name);
    char *broker = broker_dir_of(name);
    workspace_dir_remove(dir);
    if (broker)
        rmdir(broker);
    free(dir);
    free(broker);
}

/* Kills a standby that no workspace took and removes its groups and directories. */
static void standby_discard(struct workspace *sb)
{
    sandbox_stop(sb);
    cgroup_close_fds(sb->cgroup_fds);
    cgroup_workspace_remove(sb->id);
    standby_remove_dirs(sb->id);
    workspace_free(sb);
}

/* Starts one standby (the filler thread): directories, cgroups of the default tier, holder.
 * NULL with nothing left behind when any step fails. */
static struct workspace *standby_start(void)
{
    char name[32];
    struct api_error err = {0};
    snprintf(name, sizeof name, STANDBY_PREFIX "%lu", ++pool_seq);
    struct workspace *sb = workspace_new(name);
    if (!sb)
        return NULL;
    sb->tier = tier_by_name("standard");
    bool ok = workspace_make_dirs(sb) && cgroup_workspace_create(name, sb->tier, sb->cgroup_fds);
    ok = ok && sandbox_start(sb, &err);
    if (!ok) {
        log_event("standby %s: could not be started%s%s", name, err.http_status ? ": " : "",
                  err.message);
        standby_discard(sb);   /* sandbox_start left no process: this removes the rest */
        return NULL;
    }
    return sb;
}

/* Whether the pool is short of standbys and not stopping. */
static bool pool_short_locked(void)
{
    return !pool_stopping && pool_count < pool_target;
}

/* The filler thread: keeps pool_target standbys ready, one start at a time. It starts one
 * only while the running workspaces leave descriptors for it and every standby already ready,
 * else waits until a workspace stops (standby_room_freed); after a failed start it waits
 * before the next try, twice as long each time, up to a minute. */
static void *pool_fill(void *arg)
{
    (void)arg;
    int backoff_ms = 0;
    pthread_mutex_lock(&pool_lock);
    while (!pool_stopping) {
        if (!pool_short_locked()) {
            pthread_cond_wait(&pool_wake, &pool_lock);
            continue;
        }
        if (backoff_ms > 0) {
            struct timespec until = realtime_in_ms(backoff_ms);
            pthread_cond_timedwait(&pool_wake, &pool_lock, &until);
            if (pool_stopping)
                break;
        }
        int standbys = pool_count + 1;
        unsigned long room_seen = pool_room_events;
        pthread_mutex_unlock(&pool_lock);
        bool room = workspace_running_room(standbys) && !host_disk_refused();
        struct workspace *sb = room ? standby_start() : NULL;
        pthread_mutex_lock(&pool_lock);
        if (!room) {
            while (!pool_stopping && pool_room_events == room_seen)
                pthread_cond_wait(&pool_wake, &pool_lock);
            continue;
        }
        backoff_ms = sb ? 0 : backoff_ms ? (backoff_ms < 30000 ? 2 * backoff_ms : 60000) : 1000;
        if (sb && pool_short_locked()) {
            pool_ready[pool_count++] = sb;
            log_event("standby %s: holder pid %d ready", sb->id, (int)sb->holder_pid);
            sb = NULL;
        }
        if (sb) {   /* stopping meanwhile */
            pthread_mutex_unlock(&pool_lock);
            standby_discard(sb);
            pthread_mutex_lock(&pool_lock);
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

/* A workspace stopped (workspace.c, no lock held): its descriptors are free, a filler waiting
 * for room tries again. */
void standby_room_freed(void)
{
    pthread_mutex_lock(&pool_lock);
    pool_room_events++;
    pthread_cond_signal(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
}

/* Takes a ready standby of TIER out of the pool (each is handed out once), or NULL; wakes the
 * filler to replace it. */
static struct workspace *pool_take(const struct size_tier *tier)
{
    struct workspace *sb = NULL;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < pool_count && !sb; i++)
        if (pool_ready[i]->tier == tier) {
            sb = pool_ready[i];
            pool_ready[i] = pool_ready[--pool_count];
        }
    pthread_cond_signal(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
    return sb;
}

/* Renames what standby SB has under its pool name to workspace ID's: cgroups, broker
 * directory, workspace directory (in that order, so the files appear last). */
static bool standby_rename(struct workspace *sb, const char *id)
{
    char *from_dir = workspace_dir(sb->id), *to_dir = workspace_dir(id);
    char *from_broker = broker_dir_of(sb->id), *to_broker = broker_dir_of(id);
    bool ok = cgroup_workspace_rename(sb->id, id) &&
              (!from_broker || rename(from_broker, to_broker) == 0) &&
              rename(from_dir, to_dir) == 0;
    if (!ok)
        log_event("workspace %s: cannot take standby %s: %s", id, sb->id, strerror(errno));
    free(from_dir);
    free(to_dir);
    free(from_broker);
    free(to_broker);
    return ok;
}

/* Moves the holder of standby SB into workspace WS: its pids, descriptors and cgroup files. */
static void standby_hand_over(struct workspace *sb, struct workspace *ws)
{
    ws->holder_pid = sb->holder_pid;
    ws->bwrap_pid = sb->bwrap_pid;
    ws->holder_start = sb->holder_start;
    ws->user_ns_fd = sb->user_ns_fd;
    ws->net_ns_fd = sb->net_ns_fd;
    ws->root_fd = sb->root_fd;
    ws->agent_fd = sb->agent_fd;
    for (int f = 0; f < CG_FILES; f++) {
        ws->cgroup_fds[f] = sb->cgroup_fds[f];
        sb->cgroup_fds[f] = -1;
    }
    sb->user_ns_fd = sb->net_ns_fd = sb->root_fd = sb->agent_fd = -1;
    sb->holder_pid = sb->bwrap_pid = 0;
}

/*
 * A new workspace WS (fresh: nothing of it exists yet; the caller holds its lifecycle lock and
 * a running slot) takes a standby of its tier: true when WS now runs on it, with its snapshot
 * mounted and its egress started. False when there is none or the adoption failed; then
 * nothing of the standby or of WS is left and the caller starts WS the normal way.
 */
bool standby_adopt(struct workspace *ws)
{
    struct workspace *sb = pool_target > 0 ? pool_take(ws->tier) : NULL;
    if (!sb)
        return false;
    char name[sizeof sb->id];
    snprintf(name, sizeof name, "%s", sb->id);
    if (!holder_running(sb) || !standby_rename(sb, ws->id)) {
        standby_discard(sb);
        cgroup_workspace_remove(ws->id);   /* the groups a partial rename moved */
        return false;
    }
    standby_hand_over(sb, ws);
    workspace_free(sb);
    if (snapshot_make_work_dir(ws) && snapshot_mount(ws, &(struct api_error){0}) &&
        egress_start(ws)) {
        log_event("workspace %s: adopted standby holder pid %d (%s)", ws->id,
                  (int)ws->holder_pid, name);
        return true;
    }
    log_event("workspace %s: standby %s could not be set up, starting a holder", ws->id, name);
    sandbox_stop(ws);
    cgroup_close_fds(ws->cgroup_fds);
    cgroup_workspace_remove(ws->id);
    char *dir = workspace_dir(ws->id);
    workspace_dir_remove(dir);
    free(dir);
    return false;
}

/* Start-up: removes the directories of every standby named in directory PARENT (the
 * workspaces' or the broker's), which a previous run left. */
static void remove_left_in(const char *parent)
{
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (standby_name(e->d_name))
            standby_remove_dirs(e->d_name);
    if (d)
        closedir(d);
}

/* Start-up, after the workspaces are loaded and stray holders killed: removes what standbys
 * of a previous run left (directories, broker directories, cgroups), then starts the filler
 * (none with --standby 0 or in the single-workspace mode). */
void standby_init(void)
{
    char *root = xasprintf("%s/workspaces", g_config.state_dir);
    remove_left_in(root);
    free(root);
    if (g_config.broker_dir)
        remove_left_in(g_config.broker_dir);
    cgroup_remove_matching(standby_name, true);
    pool_target = g_config.single_workspace ? 0 : g_config.standby;
    if (pool_target > 0 && pthread_create(&filler, NULL, pool_fill, NULL) != 0) {
        log_event("standby holders: cannot start their thread");
        pool_target = 0;
    }
    filler_started = pool_target > 0;
    if (pool_target > 0)
        log_event("standby holders: %d kept ready for new workspaces of tier standard",
                  pool_target);
    else
        log_event("standby holders: off");
}

/* Exit: stops the filler (a start under way ends first) and kills every ready standby, so no
 * standby process, directory or cgroup outlives the daemon. */
void standby_shutdown(void)
{
    pthread_mutex_lock(&pool_lock);
    pool_stopping = true;
    pthread_cond_signal(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
    if (filler_started)
        pthread_join(filler, NULL);
    filler_started = false;
    while (pool_count > 0)
        standby_discard(pool_ready[--pool_count]);
}
