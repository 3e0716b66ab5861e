/*
 * sandboxd.h - shared declarations of mesh-sandboxd, the sandbox host daemon.
 *
 * The daemon serves docs/protocol.md over HTTP. Each workspace is a directory under the state
 * dir plus a long-lived bubblewrap "holder", whose process is the workspace's exec agent
 * (agent.c, a binary of its own): every exec is one message to it, and it starts the command
 * inside the sandbox, so a warm exec costs about one process creation. This header is the one
 * place where the daemon's modules (http, route, workspace, sandbox, exec, background, seccomp,
 * files, egress, cgroup, capabilities, json, log, standby) meet; agent_proto.h is the agent's.
 *
 * Threads and what they may touch
 * -------------------------------
 * - The main thread parses flags, detects capabilities and loads the state dir before any
 *   other thread exists, then only waits for signals, reaps orphans and the children request
 *   threads hand it (reaper_watch), and drains.
 * - libmicrohttpd runs one thread per connection (request threads); each egress proxy has an
 *   accept thread and one thread per proxied connection.
 * - Holder and egress-listener children share the daemon's memory (CLONE_VM, spawn_borrowing)
 *   until they exec or exit; they read what their spawner prepared and make system calls only.
 *
 * Shared mutable data and its lock: the registry list, every workspace's refcount and the
 * count of running workspaces under registry_lock (workspace.c); requests in flight under
 * in_flight_lock (http.c); the snapshots being captured under snap_lock (snapshot.c);
 * g_shutting_down through __atomic builtins; each workspace's fields
 * as struct workspace says; each egress proxy's denial ring and counts under its lock.
 *
 * Data written only before the listeners start, read-only afterwards (no lock): g_config,
 * g_caps, the tier table, the curated /etc path, the exec agent's binary, the cgroup
 * controller table, egress test names.
 *
 * Rules for request threads:
 * - No libc call with hidden static state: no strtok (route.c splits paths re-entrantly), no
 *   localtime, gmtime or ctime (gmtime_r), no getpwnam or getpwuid (users are resolved once at
 *   start), no getenv/setenv, no rand, no readdir on a shared stream (only at start). strerror
 *   is thread-safe in glibc >= 2.32 (unknown codes use a per-thread buffer). jansson's
 *   reference counts are atomic (JSON_HAVE_ATOMIC_BUILTINS), so a shared read-only document
 *   (labels, allow) may be packed into responses by several threads at once; no thread
 *   modifies a shared document.
 * - log_event writes one stdio call per line (stdio locks the stream).
 * - Lock order: lifecycle, then registry_lock (workspace.c), then workspace lock, then an
 *   egress lock; snap_lock (snapshot.c) before registry_lock, never together with a
 *   lifecycle lock; in_flight_lock (http.c) and pool_lock (standby.c) are taken alone; a workspace lock before a background
 *   record's lock (background.c), never the other way. No lock is held across an exec.
 */
#ifndef MESH_SANDBOXD_H
#define MESH_SANDBOXD_H

#define _GNU_SOURCE
#include <pthread.h>
#include <pwd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>

#define MESH_PROTOCOL_VERSION 1
#define WORKSPACE_ID_MAX 128

/* ---- configuration (main.c) ---- */
enum release_mode { RELEASE_DESTROY, RELEASE_HIBERNATE };

struct config {
    char *listen_addr;          /* --listen host part, NULL when not listening on TCP */
    int listen_port;
    char *token;                /* first line of --token-file; never logged */
    char *socket_path;          /* --socket */
    char *state_dir;            /* --state-dir */
    char *rootfs;               /* --rootfs, NULL = curated host base */
    char *broker_dir;           /* --broker-dir: shown read-only at /run/mesh in every sandbox */
    char *bwrap_path;           /* --bwrap */
    char *cgroup_name;          /* --cgroup-name (or host.json): our subtree in every v1
                                   hierarchy */
    char *protect_path;         /* --protect-path: refuse workspaces on this filesystem */
    uid_t sandbox_uid;          /* --sandbox-user */
    gid_t sandbox_gid;
    bool is_root;               /* the daemon runs with euid 0 */
    enum release_mode release_default;
    bool hibernate_on_exit;     /* --hibernate-on-exit: no sandbox outlives the daemon */
    int ready_fd;               /* --ready-fd: written once requests are served; 0 = none */
    const char *single_workspace; /* --single-workspace: the one workspace id served, or NULL */
    int standby;                /* --standby: holders kept ready for new workspaces */
    size_t max_body_bytes;
    size_t max_file_bytes;
    size_t max_output_bytes;
    size_t max_kept_output_bytes;    /* per stream, for output "tail" */
    size_t max_background_execs;     /* per workspace: background records, ended ones included */
    double background_ttl_ms;        /* an ended background record is forgotten this long after
                                        its end, fetched or not (--background-ttl) */
    size_t background_buffer_bytes;  /* per stream of a background exec: bytes held for its
                                        client before the command blocks on write */
    size_t background_buffer_total;  /* all background execs' buffers together: past it a
                                        stream grows no buffer past a pipe's capacity */
    struct rlimit inherited_files; /* the open-files limit before the daemon raised its own;
                                      sandbox processes get this one back */
};

/* capabilities detected at start (capabilities.c) */
struct host_caps {
    bool shell;
    bool resource_limits;
    bool compute_metering;
    bool egress_control;
    bool disk_limits;           /* workspace files on a bounded filesystem of their own */
    bool disk_quota;            /* and each workspace bounded on it by its tier (quota.c) */
    bool snapshot;
    bool hibernate;
    bool caller_chosen_id;
    bool seccomp;               /* every workspace process runs under the system-call filter */
    bool background;            /* background execs (always: a protocol feature) */
};

extern struct config g_config;
extern struct host_caps g_caps;

/* the main thread reaps this child of a request thread as soon as it exits (main.c) */
void reaper_watch(pid_t pid);

/* ---- size tiers: the one table (capabilities.c) ---- */
struct size_tier {
    const char *name;
    unsigned memory_mb;
    double cpus;
    unsigned pids;
    unsigned disk_mb;            /* files (data and metadata), at most a quarter of the disk */
    unsigned inotify_instances;  /* in the sandbox's user namespace */
    unsigned inotify_watches;
};
const struct size_tier *tier_by_name(const char *name);
const struct size_tier *tier_table(size_t *count);
void caps_detect(void);
json_t *caps_to_json(void);

/* ---- logging (log.c) ---- */
void log_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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

/* ---- JSON helpers (json.c) ---- */
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

/* ---- cgroups v1 (cgroup.c) ---- */
enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_CPUACCT, CG_COUNT };
/* A running workspace's open cgroup files: cgroup.procs of each controller, then two memory
 * control files read or written by every exec. */
enum { CG_OOM_CONTROL = CG_COUNT, CG_PEAK, CG_FILES };
bool cgroup_available(int controller);
bool cgroup_workspace_create(const char *id, const struct size_tier *tier, int fds[CG_FILES]);
bool cgroup_workspace_rename(const char *from, const char *to);
void cgroup_remove_matching(bool (*matches)(const char *name), bool kill);
void cgroup_workspace_remove(const char *id);
void cgroup_close_fds(int fds[CG_FILES]);
int cgroup_exec_group_open(int controller, const char *id, int slot, bool create);
uint64_t cgroup_exec_group_counter(int controller, const char *id, int slot);
void cgroup_exec_slot_prepare(const char *id, int slot);
uint64_t cgroup_workspace_oom_kills(const int fds[CG_FILES]);
void cgroup_peak_reset(const int fds[CG_FILES]);
long long cgroup_peak_bytes(const int fds[CG_FILES]);
bool cgroup_delegate(const char *name, uid_t uid, gid_t gid);
void cgroup_init(void);

/* ---- install-time host preparation (hostsetup.c) ---- */
int host_setup(const char *user, size_t disk_bytes, unsigned quota_slots, bool cgroup_name_given,
               bool expedite_rcu);
void host_config_load(void);
bool host_disk_isolated(void);
bool host_disk_refused(void);

/* ---- per-workspace disk quotas and inotify bounds (quota.c) ---- */
uint64_t quota_tier_limit(const struct size_tier *tier, uint64_t disk_bytes);
bool quota_setup_host(const char *mountpoint, uint64_t disk_bytes, unsigned slots, uid_t uid,
                      gid_t gid, json_t *record);
void quota_init(void);
bool quota_layout(void);
uint64_t quota_tier_bytes(const struct size_tier *tier);
char *quota_store_dir(const char *id);
char *quota_in_slot(const char *id, const char *name);
bool quota_slot_take(const struct size_tier *tier, const char *dir);
bool quota_slot_return(const char *dir);
bool quota_full(const char *id);
struct workspace;
bool quota_inotify_bound(struct workspace *ws);

/* ---- workspaces (workspace.c) ---- */
enum ws_state { WS_RUNNING, WS_HIBERNATED, WS_STOPPING };

struct exec_run;
struct background;

/*
 * One workspace. Which thread may touch what:
 * - id, tier, network, allow, labels, created_at, snapshot: set before the object is published in the
 *   registry, never written again; read freely by whoever holds a reference.
 * - refcount, next: under registry_lock (workspace.c). A reference (workspace_get) keeps the
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

void workspaces_init(void);
bool workspace_id_valid(const char *id);
struct workspace *workspace_new(const char *id);
void workspace_free(struct workspace *ws);
bool workspace_make_dirs(struct workspace *ws);
bool workspace_running_room(int standbys);
struct workspace *workspace_get(const char *id, struct api_error *err);
void workspace_put(struct workspace *ws);
enum ws_state workspace_state(struct workspace *ws);
json_t *workspace_acquire(const char *id, json_t *body, struct api_error *err);
json_t *workspace_release(const char *id, json_t *body, struct api_error *err);
json_t *workspace_list(const char *label_filter, struct api_error *err);
json_t *workspace_describe(struct workspace *ws);
void workspace_hold(struct workspace *ws);
void workspaces_kill_background(void);
void workspaces_sweep_background(void);
void workspaces_hibernate_all(void);
void workspaces_kill_execs(void);
char *workspace_dir(const char *id);
char *workspace_files_dir(const char *id);
bool workspace_dir_remove(const char *dir);
int workspaces_on_snapshot(const char *snapshot_id);

/* ---- standby holders (standby.c) ---- */
bool standby_name(const char *name);
bool standby_adopt(struct workspace *ws);
void standby_init(void);
void standby_shutdown(void);
void standby_room_freed(void);

/* ---- project-state snapshots (snapshot.c) ---- */
bool snapshot_detect(void);
void snapshots_init(void);
void snapshot_lock(void);
void snapshot_unlock(void);
bool snapshot_usable(const char *id, struct api_error *err);
bool snapshot_make_work_dir(struct workspace *ws);
bool snapshot_mount(struct workspace *ws, struct api_error *err);
char *workspace_work_dir(const char *id);
json_t *snapshot_capture(const char *id, json_t *body, struct api_error *err);
json_t *snapshot_get(const char *id, struct api_error *err);
json_t *snapshot_list(const char *label_filter, struct api_error *err);
json_t *snapshot_delete(const char *id, struct api_error *err);

/* ---- what a capture leaves out (snapshot_exclude.c) ---- */
#define MESHIGNORE_MAX_BYTES (64 * 1024)   /* a larger /workspace/.meshignore refuses the capture */
#define MESHIGNORE_MAX_PATTERNS 512   /* 512 cost ~50 us of matching per entry captured */
struct capture_exclusions {
    struct exclude_pattern *patterns;
    int count;
    char *text;   /* the list as read; the patterns point into it */
};
bool capture_exclusions_load(int workspace, struct capture_exclusions *ex, struct api_error *err);
bool capture_exclusions_parse(char *text, struct capture_exclusions *ex, struct api_error *err);
bool capture_excludes(const struct capture_exclusions *ex, const char *path, const char *name,
                      bool is_dir);
void capture_exclusions_free(struct capture_exclusions *ex);

/* ---- sandbox holder (sandbox.c) ---- */
void sandbox_init(void);
bool sandbox_start(struct workspace *ws, struct api_error *err);
bool sandbox_adopt(struct workspace *ws);
void sandbox_stop(struct workspace *ws);
void sandbox_close_fds(struct workspace *ws);
bool run_host_command(char *const argv[]);
bool process_start_time(pid_t pid, unsigned long long *start, char *state);
bool holder_running(struct workspace *ws);
bool holder_ends_within(struct workspace *ws, int ms);
void sandbox_kill_strays(bool (*registered)(const char *id, pid_t holder_pid));

/* ---- exec (exec.c) ---- */
/* An exec's kept output as raw bytes, stdout then stderr (output "tail"); malloc'd. */
struct exec_output {
    unsigned char *bytes;
    size_t len;
};

/* ---- an exec's output streams (capture.c) ---- */
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

json_t *exec_run_request(struct workspace *ws, json_t *body, struct exec_output *raw,
                         struct api_error *err);
bool exec_kill_by_key(struct workspace *ws, const char *key, int sig);
void exec_kill_all(struct workspace *ws, bool background_only);
bool exec_signal_parse(json_t *body, int *sig, struct api_error *err);

/* ---- background execs' records (background.c) ---- */
/* What GET .../execs/{key}/output asks, per stream (stdout, stderr): where the answer's bytes
 * start, and before which they are acknowledged (ack <= from); then the wait and the size. */
struct output_query {
    uint64_t from[2];
    uint64_t ack[2];
    uint64_t wait_ms;
    size_t max_bytes;
};
struct background *background_new(const char *key);
void background_put(struct background *bg);
void background_link_locked(struct workspace *ws, struct background *bg);
void background_unlink(struct workspace *ws, struct background *bg);
bool background_key_taken_locked(struct workspace *ws, const char *key);
size_t background_count_locked(struct workspace *ws);
void background_drop(struct workspace *ws, bool expired_only);
int background_wake_fd(struct background *bg);
void background_wake_clear(struct background *bg);
bool background_room(struct background *bg, int stream);
bool background_read(struct background *bg, int stream, int fd, bool ended);
void background_end(struct background *bg, json_t *end);
void background_supervisor_count(int delta);
void background_wait_supervisors(void);
json_t *background_output(struct workspace *ws, const char *key, const struct output_query *q,
                          struct exec_output *raw, struct api_error *err);
bool background_forget(struct workspace *ws, const char *key, struct api_error *err);

/* ---- workspace network access (egress.c) ---- */
#define EGRESS_PORT 3128          /* the proxy's address inside every sandbox: 127.0.0.1:3128 */
struct egress;
bool egress_detect(void);
bool egress_pattern_valid(const char *pattern);
bool egress_add_test_name(const char *spec);
bool egress_wanted(struct workspace *ws);
bool egress_start(struct workspace *ws);
void egress_stop(struct workspace *ws);
struct egress *egress_mark(struct workspace *ws, uint64_t *seq);
json_t *egress_denials_since(struct egress *eg, uint64_t seq);

/* ---- system-call filter (seccomp.c) ---- */
bool seccomp_detect(void);
bool seccomp_apply(void);
int seccomp_program_fd(void);

/* ---- files (files.c) ---- */
#define FILES_TEMP_PREFIX ".mesh-write-"   /* an atomic write's temporary file, beside its target */
struct file_data {
    unsigned char *bytes;
    size_t len;
    unsigned mode;
};
bool files_read(struct workspace *ws, const char *path, struct file_data *out, struct api_error *err);
json_t *files_write(struct workspace *ws, const char *path, const char *mode_text,
                    const unsigned char *data, size_t len, struct api_error *err);

/* ---- routing (route.c) ---- */
#define ROUTE_MAX_SEGMENTS 8
enum route_kind {
    /* the list routes first: from ROUTE_WORKSPACE on, a route names one object (fuzz_route) */
    ROUTE_NONE, ROUTE_CAPABILITIES, ROUTE_WORKSPACES, ROUTE_SNAPSHOTS, ROUTE_WORKSPACE, ROUTE_EXEC,
    ROUTE_FILES, ROUTE_KILL, ROUTE_EXEC_OUTPUT, ROUTE_EXEC_RECORD, ROUTE_SNAPSHOT, ROUTE_REFUSED
};
struct route_path {
    char *text;                              /* the request's own copy of the path */
    char *segments[ROUTE_MAX_SEGMENTS];
    int count;
};
enum route_kind route_match(const char *url, struct route_path *path);

/* ---- single-workspace mode (single.c) ---- */
bool single_workspace_valid(const char *id);
bool single_workspace_refuses(enum route_kind kind, const struct route_path *path);
void route_path_free(struct route_path *path);

/* ---- http (http.c) ---- */
bool http_start(void);
void http_stop(void (*each_turn)(void));
extern int g_shutting_down;   /* __atomic_load_n / __atomic_store_n */

/* ---- small utilities (util.c) ---- */
bool user_lookup(const char *name, uid_t uid, struct passwd *pw, char *buf, size_t len);

/*
 * Children that borrow the daemon's memory (holder and listener spawns) are created with
 * CLONE_VM: no page tables are copied, so their cost does not grow with the daemon's threads
 * and mappings. Sanitizer builds (make tsan, make asan) give them a copy instead (slower, same
 * results): ThreadSanitizer models every clone() as a fork() and corrupts its own state when
 * the child shares memory, and a child running AddressSanitizer's instrumented code can exit
 * holding one of its locks, which then deadlocks every thread of the daemon.
 */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer) || \
    defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define HELPER_CLONE_VM 0
#else
#define HELPER_CLONE_VM CLONE_VM
#endif
/* Marks a function that runs in such a child and exits from it: not instrumented by
 * AddressSanitizer, whose runtime warns about the foreign stack at _exit and, inside a
 * sandbox, cannot write that warning to its log and dies instead. */
#define CHILD_ENTRY __attribute__((no_sanitize("address")))
pid_t spawn_borrowing(int (*fn)(void *), void *arg);
CHILD_ENTRY bool become_sandbox_user(void);
CHILD_ENTRY bool write_proc_file(const char *path, const char *text);
double monotonic_ms(void);
struct timespec realtime_in_ms(long ms);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool write_file_atomic(const char *path, const char *data, size_t len, mode_t mode, bool sync);
bool remove_tree(const char *path);
bool mkdir_p(const char *path, mode_t mode);
void close_fd(int *fd);

#endif
