/*
 * config.h - mesh-sandboxd's settings (from flags and host.json), the capabilities found at
 * start, and the drain flag: the ground floor every module reads (config.c defines them).
 *
 * The daemon serves docs/protocol.md over HTTP. Each workspace is a directory under the state
 * dir plus a long-lived bubblewrap "holder", whose process is the workspace's exec agent
 * (agent.c, a binary of its own): every exec is one message to it, and it starts the command
 * inside the sandbox, so a warm exec costs about one process creation. Each module has a
 * header of its own declaring only its functions, and the modules form a tree: the ground
 * floor (config, tiers, layout, registry, json, log, util, cgroup, reaper) includes nothing
 * above it (test/e2e/include_graph.t checks that, and that no include circle exists);
 * agent_proto.h is the agent's.
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
 * count of running workspaces under registry_lock (registry.c); requests in flight under
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
 * - Lock order: lifecycle, then registry_lock (registry.c), then workspace lock, then an
 *   egress lock; snap_lock (snapshot.c) before registry_lock, never together with a
 *   lifecycle lock; in_flight_lock (http.c) and pool_lock (standby.c) are taken alone; a workspace lock before a background
 *   record's lock (background.c), never the other way. No lock is held across an exec.
 */
#ifndef MESH_SANDBOXD_CONFIG_H
#define MESH_SANDBOXD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

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
    bool extend_timeout;        /* a running exec's deadline moves by extend calls (always) */
};

extern struct config g_config;
extern struct host_caps g_caps;
extern int g_shutting_down;   /* set once by the main thread; __atomic_load_n / __atomic_store_n */

#endif
