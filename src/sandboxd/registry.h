/*
 * registry.h - the workspace object and the registry of them: who may touch which field, the
 * list of registered workspaces under registry_lock, references, and the count of running
 * workspaces that bounds the daemon's descriptors (registry.c). What a workspace does (acquire,
 * release, load) is workspace.c's.
 */
#ifndef MESH_SANDBOXD_REGISTRY_H
#define MESH_SANDBOXD_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>
#include "cgroup.h"
#include "json.h"
#include "layout.h"
#include "tiers.h"

enum ws_state { WS_RUNNING, WS_HIBERNATED, WS_STOPPING };

struct exec_run;
struct background;
struct egress;

/*
 * One workspace. Which thread may touch what:
 * - id, tier, network, allow, labels, created_at, snapshot: set before the object is published in the
 *   registry, never written again; read freely by whoever holds a reference.
 * - refcount, next: under registry_lock (registry.c). A reference (workspace_get) keeps the
 *   object, not the workspace: it may be released meanwhile.
 * - state, removed: written by the thread holding lifecycle, under lock (and registry_lock
 *   for removed); read under lock (workspace_state), or by the lifecycle holder.
 * - fresh: set before publication, then read and cleared only by the lifecycle holder.
 * - holder_pid, bwrap_pid, holder_start, agent_fd, user_ns_fd, net_ns_fd, root_fd, cgroup_fds:
 *   written only by the lifecycle holder, and only while no exec is registered
 *   (workspace_stop waits for execs_done first); read by the lifecycle holder and by an exec
 *   between exec_register and exec_unregister, which pins them. File calls dup root_fd under
 *   lock.
 * - execs, backgrounds, egress, exec_slots, exec_slots_known: under lock; slot_oom_kills[n] and
 *   slot_cpu_ns[n] by the exec holding slot n.
 */
struct workspace {
    char id[WORKSPACE_ID_MAX + 1];
    const struct size_tier *tier;
    char network[16];                 /* none, open or allowlist (creation-time) */
    json_t *allow;                    /* allowlist patterns, NULL unless allowlist */
    struct egress *egress;            /* the running proxy, NULL when none (egress.c) */
    json_t *labels;
    time_t created_at;
    char snapshot[WORKSPACE_ID_MAX + 1]; /* the snapshot under /workspace, "" = none */
    enum ws_state state;
    /* holder: the bubblewrap sandbox, whose process is the exec agent */
    pid_t holder_pid;
    pid_t bwrap_pid;                  /* bwrap's outer process if this daemon started it */
    unsigned long long holder_start;  /* /proc/PID/stat field 22, to detect pid reuse */
    int user_ns_fd;                   /* bwrap's outer user namespace, -1 = none */
    int net_ns_fd;                    /* the sandbox's network namespace (egress listener) */
    int root_fd;                      /* the holder's / (file calls resolve in it) */
    int agent_fd;                     /* the agent's request channel (agent_proto.h), -1 */
    int cgroup_fds[CG_FILES];         /* cgroup.procs of each controller and the memory
                                         control files, -1 if none */
    int refcount;                     /* registry + in-flight requests */
    bool removed;                     /* released: unreachable by id */
    bool fresh;                       /* registered, never started: the next acquire makes it
                                         (lifecycle holder only) */
    pthread_mutex_t lock;             /* state, removed, execs, egress */
    pthread_mutex_t lifecycle;        /* serialises acquire and release of this id */
    pthread_cond_t execs_done;        /* signalled (under lock) when execs becomes empty */
    struct workspace *next;           /* registry list */
    struct exec_run *execs;           /* running execs, for kill-by-key and release */
    struct background *backgrounds;   /* background execs' records (background.c) */
    uint64_t exec_slots;              /* busy per-exec groups (bit n: exec-n) */
    uint64_t exec_slots_known;        /* groups made since the workspace started, whose
                                         counters below are what their last exec left */
    uint64_t slot_oom_kills[64];      /* per slot: its memory group's oom_kill counter */
    uint64_t slot_cpu_ns[64];         /* per slot: its cpuacct group's usage */
};

/* objects */
struct workspace *workspace_new(const char *id);
void workspace_free(struct workspace *ws);
void registry_on_free(void (*release)(struct workspace *ws));
enum ws_state workspace_state(struct workspace *ws);

/* the list, under registry_lock */
void registry_lock(void);
void registry_unlock(void);
struct workspace *registry_first(void);
struct workspace *registry_find(const char *id);
void registry_insert(struct workspace *ws);
void registry_remove(struct workspace *ws);

/* references */
struct workspace *workspace_get(const char *id, struct api_error *err);
void workspace_hold(struct workspace *ws);
void workspace_put(struct workspace *ws);
int workspaces_on_snapshot(const char *snapshot_id);

/* admission by descriptors */
void registry_running_init(void);
bool registry_running_take(struct api_error *err);
void registry_running_give(void);
void registry_running_adopted(void);
bool workspace_running_room(int standbys);

#endif
