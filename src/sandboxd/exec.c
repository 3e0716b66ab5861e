/*
 * exec.c - run one command in a warm workspace by joining the holder's namespaces.
 *
 * Process chain of one exec (creating processes is expensive on this machine, about 1 ms per
 * fork, so the helpers share the daemon's memory with CLONE_VM instead of copying it):
 *
 *   daemon thread --clone(VM|FILES)--> outer: joins the workspace cgroups (all but memory),
 *     becomes the sandbox user, setns(user, ipc, uts, net, mnt, pid, cgroup, inner user),
 *     chroots into the holder's root
 *   outer --clone(VM|FILES)--> pidns: in the workspace pid namespace; unshare(CLONE_NEWPID)
 *   pidns --clone(VM|PIDFD)--> init: pid 1 of a fresh per-exec pid namespace; wires
 *     stdio, drops every capability (bounding, ambient, effective, permitted), sets
 *     no_new_privs, installs the system-call filter (seccomp.c)
 *   init --clone(VM|VFORK)--> command: joins the exec's memory group, execs argv (pid 2); init
 *     reaps until it exits.
 *
 * A per-exec pid namespace gives the protocol's tree semantics for free: when its init exits
 * (right after the command) or is SIGKILLed by the daemon (timeout, kill call, release), the
 * kernel kills everything left in the namespace, double-forked daemons included. The helpers
 * only make system calls on their own stacks and write results into the shared exec_run.
 */
#include "sandboxd.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELPER_STACK_BYTES (128 * 1024)

#define DEFAULT_TIMEOUT_MS 300000

enum kill_reason { KILL_NONE, KILL_TIMEOUT, KILL_REQUEST, KILL_RELEASE };

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

struct exec_run {
    struct exec_run *next;
    struct workspace *ws;
    char *key;
    int kill_reason;                 /* enum kill_reason, first one wins (atomic) */
    /* read by the helper processes */
    char **argv, **envp;
    const char *dir, *path_env;
    int child_stdin, child_stdout, child_stderr;
    int outer_pidfd, init_pidfd;     /* init_pidfd written by the pidns helper (atomic) */
    int slot;                        /* the exec's own groups (exec-<slot>), -1 if none */
    int memory_group_fd;             /* their cgroup.procs, -1 without the controller */
    int cpu_group_fd;
    uint64_t oom_kills_before;       /* their counters when the exec began */
    uint64_t holder_oom_kills_before; /* the workspace group's (the holder's) */
    uint64_t cpu_ns_before;
    long long cpu_ns;                /* the exec's CPU by its cpuacct group, -1 if unknown */
    char *stacks;
    /* written by the helper processes */
    const char *failed_step;
    int failed_errno;
    bool init_reaped;                /* the pidns helper reaped init: usage is complete */
    struct rusage init_usage;
    int init_status;                 /* tells why the command never started (127) */
    bool command_done;               /* init reaped the command: its status is known */
    int command_status;
    int spawn_errno;                 /* the command never started: why (0 = it started) */
    bool spawn_in_dir;               /* ... because its working directory failed, not execve */
};

/* Records which setup step failed so the daemon can answer spawn_failed with a reason. */
CHILD_ENTRY static int helper_fail(struct exec_run *run, const char *step)
{
    run->failed_errno = errno;
    run->failed_step = step;
    _exit(1);
}

/* Whether the daemon decided to end this exec (helpers check it between steps, closing the
 * window before a pidfd exists). */
static bool kill_requested(struct exec_run *run)
{
    return __atomic_load_n(&run->kill_reason, __ATOMIC_SEQ_CST) != KILL_NONE;
}

/* Writes "mesh: WHAT: REASON" to the command's stderr (inside the init helper). */
static void init_report(const char *what, const char *reason)
{
    char line[1024];
    snprintf(line, sizeof line, "mesh: %s: %s\n", what, reason);
    if (write(2, line, strlen(line)) < 0)
        return;
}

/* strerror for the helpers: a constant string, no locale or translation machinery, which
 * could allocate on memory shared with a daemon thread. */
static const char *helper_strerror(int error)
{
    const char *text = strerrordesc_np(error);
    return text ? text : "unknown error";
}

/* Highest capability number of this kernel (/proc/sys/kernel/cap_last_cap). */
static int last_capability = CAP_LAST_CAP;

/* Reads the kernel's highest capability once, before any exec: helpers must not make
 * failing system calls (they share errno with a daemon thread). */
void exec_init(void)
{
    FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
    int value;
    if (f && fscanf(f, "%d", &value) == 1 && value > 0 && value < 64)
        last_capability = value;
    if (f)
        fclose(f);
}

/* Drops every capability for good: bounding and ambient sets, then effective, permitted and
 * inheritable, and sets no_new_privs. Joining with setns granted full capabilities in the
 * workspace's user namespace; none of them may reach the command. */
static bool drop_all_capabilities(void)
{
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    for (int cap = 0; cap <= last_capability; cap++)   /* no failing calls: errno is shared */
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            return false;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        return false;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return false;
    return syscall(SYS_capset, &header, data) == 0;
}

/* execve with a PATH search (argv[0] without '/'); returns only on failure, with errno of the
 * most telling attempt: a failure that is not about the file's absence (E2BIG, ENOEXEC, ...)
 * ends the search at once and is what the caller reports; EACCES beats ENOENT. */
static void exec_with_path(struct exec_run *run)
{
    const char *file = run->argv[0];
    char candidate[4096];
    int best_errno = ENOENT;
    if (strchr(file, '/')) {
        execve(file, run->argv, run->envp);
        return;
    }
    for (const char *dir = run->path_env; dir && *dir;) {
        const char *end = strchrnul(dir, ':');
        size_t dir_len = (size_t)(end - dir);
        if (dir_len + strlen(file) + 2 <= sizeof candidate) {
            memcpy(candidate, dir, dir_len);
            candidate[dir_len] = '/';
            strcpy(candidate + dir_len + 1, file);
            execve(candidate, run->argv, run->envp);
            if (errno == EACCES)
                best_errno = EACCES;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE)
                return;
        }
        dir = *end ? end + 1 : end;
    }
    errno = best_errno;
}

/* Stage 4, the command: joins the exec's memory group (inherited as fd 3) and execs, or
 * reports 127. Until execve it still shares the daemon's memory, but as a vfork child it is
 * never the OOM killer's choice; from execve on, its memory is its own and charged there. */
CHILD_ENTRY static int exec_command_stage(void *arg)
{
    struct exec_run *run = arg;
    if (run->memory_group_fd >= 0 && (write(3, "0", 1) != 1 || close(3) != 0)) {
        init_report("cannot join the workspace memory group", helper_strerror(errno));
        _exit(127);
    }
    exec_with_path(run);
    run->spawn_errno = errno;
    init_report(run->argv[0], errno == ENOENT ? "command not found" : helper_strerror(errno));
    _exit(127);
}

/* Stage 3, pid 1 of the per-exec pid namespace: stdio, directory and privileges, then the
 * command as pid 2 (so it keeps normal signal semantics, which pid 1 lacks). As init it
 * reaps orphans until the command exits, records the command's status and exits, upon which
 * the kernel kills whatever the command left behind. */
CHILD_ENTRY static int exec_init_stage(void *arg)
{
    struct exec_run *run = arg;
    sigset_t none;
    int status;
    if (dup2(run->child_stdin, 0) < 0 || dup2(run->child_stdout, 1) < 0 ||
        dup2(run->child_stderr, 2) < 0)
        _exit(127);
    if (run->memory_group_fd >= 0 && dup2(run->memory_group_fd, 3) != 3)
        _exit(127);
    close_range(run->memory_group_fd >= 0 ? 4 : 3, ~0U, 0);
    if (g_config.inherited_files.rlim_max)   /* known: give the sandbox its own limit back */
        setrlimit(RLIMIT_NOFILE, &g_config.inherited_files);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setsid();
    if (chdir("/workspace") != 0 || chdir(run->dir) != 0) {
        run->spawn_errno = errno;
        run->spawn_in_dir = true;
        init_report(run->dir, helper_strerror(errno));
        _exit(127);
    }
    if (!drop_all_capabilities()) {
        init_report("cannot drop privileges", helper_strerror(errno));
        _exit(127);
    }
    if (!seccomp_apply()) {   /* after no_new_privs; the command inherits it */
        init_report("cannot install the system-call filter", strerror(errno));
        _exit(127);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (kill_requested(run))
        _exit(137);
    pid_t command = clone(exec_command_stage, run->stacks + 4 * HELPER_STACK_BYTES,
                          HELPER_CLONE_VM | CLONE_VFORK | SIGCHLD, run);
    if (command < 0) {
        init_report(run->argv[0], helper_strerror(errno));
        _exit(127);
    }
    close(0);
    for (;;) {
        pid_t pid = waitpid(-1, &status, __WALL);
        if (pid == command) {
            run->command_status = status;
            __atomic_store_n(&run->command_done, true, __ATOMIC_SEQ_CST);
            _exit(0);
        }
        if (pid < 0 && errno != EINTR)
            _exit(127);
    }
}

/* Stage 2, inside the workspace pid namespace: creates the per-exec pid namespace, starts
 * its init and waits for it, storing status and resource usage for the daemon. */
CHILD_ENTRY static int exec_pidns_stage(void *arg)
{
    struct exec_run *run = arg;
    int status;
    struct rusage usage;
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (kill_requested(run))
        _exit(0);
    if (unshare(CLONE_NEWPID) != 0)
        helper_fail(run, "unshare(pid)");
    /* the kernel stores the pidfd in run->init_pidfd before init runs */
    pid_t init = clone(exec_init_stage, run->stacks + 3 * HELPER_STACK_BYTES,
                       HELPER_CLONE_VM | CLONE_PIDFD | SIGCHLD, run, &run->init_pidfd);
    if (init < 0)
        helper_fail(run, "clone(init)");
    if (kill_requested(run))
        kill(init, SIGKILL);
    while (wait4(init, &status, __WALL, &usage) < 0)
        if (errno != EINTR)
            helper_fail(run, "wait4(init)");
    run->init_status = status;
    run->init_usage = usage;
    __atomic_store_n(&run->init_reaped, true, __ATOMIC_SEQ_CST);
    _exit(0);
}

/* Stage 1, outside: cgroups, identity and namespaces of the workspace, then stage 2. */
CHILD_ENTRY static int exec_outer_stage(void *arg)
{
    static const int ns_types[6] = {CLONE_NEWUSER, CLONE_NEWIPC, CLONE_NEWUTS,
                                    CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID};
    struct exec_run *run = arg;
    struct workspace *ws = run->ws;
    /* not the memory group: a helper shares the daemon's memory, and the OOM killer kills
     * every process sharing its victim's memory; the command joins it (exec_command_stage) */
    for (int c = 0; c < CG_COUNT; c++) {
        int fd = c == CG_CPUACCT && run->cpu_group_fd >= 0 ? run->cpu_group_fd : ws->cgroup_fds[c];
        if (c != CG_MEMORY && fd >= 0 && write(fd, "0", 1) != 1)
            helper_fail(run, "cgroup attach");
    }
    /* raw system calls: glibc's wrappers would broadcast to the daemon's threads */
    if (g_config.is_root &&
        (syscall(SYS_setgroups, 0, NULL) != 0 ||
         syscall(SYS_setresgid, g_config.sandbox_gid, g_config.sandbox_gid,
                 g_config.sandbox_gid) != 0 ||
         syscall(SYS_setresuid, g_config.sandbox_uid, g_config.sandbox_uid,
                 g_config.sandbox_uid) != 0))
        helper_fail(run, "set sandbox user");
    for (int i = 0; i < 6; i++)
        if (setns(ws->ns_fds[i], ns_types[i]) != 0)
            helper_fail(run, "setns");
    if (ws->ns_fds[7] >= 0 && setns(ws->ns_fds[7], CLONE_NEWCGROUP) != 0)
        helper_fail(run, "setns(cgroup)");
    if (ws->ns_fds[6] >= 0 && setns(ws->ns_fds[6], CLONE_NEWUSER) != 0)
        helper_fail(run, "setns(inner user)");
    if (fchdir(ws->root_fd) != 0 || chroot(".") != 0)
        helper_fail(run, "chroot");
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (kill_requested(run))
        _exit(0);
    pid_t pidns = clone(exec_pidns_stage, run->stacks + 2 * HELPER_STACK_BYTES,
                        HELPER_CLONE_VM | CLONE_FILES | SIGCHLD, run);
    if (pidns < 0)
        helper_fail(run, "clone(pidns)");
    while (waitpid(pidns, NULL, __WALL) < 0 && errno == EINTR)
        ;
    _exit(0);
}

/* SIGKILLs the exec's tree: its init (pid 1 of the exec's namespace) when known, else the
 * outer helper, whose death cascades through parent-death signals. */
static void exec_kill_tree(struct exec_run *run, enum kill_reason reason)
{
    int expected = KILL_NONE;
    __atomic_compare_exchange_n(&run->kill_reason, &expected, reason, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    int init_pidfd = __atomic_load_n(&run->init_pidfd, __ATOMIC_SEQ_CST);
    if (init_pidfd >= 0)
        syscall(SYS_pidfd_send_signal, init_pidfd, SIGKILL, NULL, 0);
    else if (run->outer_pidfd >= 0)
        syscall(SYS_pidfd_send_signal, run->outer_pidfd, SIGKILL, NULL, 0);
}

/* ---- output capture ---- */

/* Sizes a capture for LIMIT bytes per stream: half head, half tail, or all tail. */
static void capture_init(struct capture *cap, size_t limit, bool tail_only)
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
static void capture_free(struct capture *cap)
{
    free(cap->head);
    free(cap->tail);
    cap->head = cap->tail = NULL;
}

/* Base64 of head + marker + tail, for the JSON response; frees the capture. */
static char *capture_finish(struct capture *cap, bool *truncated)
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
static bool capture_finish_raw(struct capture *out, struct capture *errc, json_t *resp,
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

/* Reads what is available from the non-blocking FD into CAP (stops at EAGAIN or EOF). */
static void capture_read(int fd, struct capture *cap)
{
    unsigned char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        capture_append(cap, buf, (size_t)n);
}

/* ---- request parsing ---- */

/* Parsed exec request. */
struct exec_request {
    char **argv;
    char **envp;
    const char *dir;
    const char *path_env;
    unsigned char *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    uint64_t timeout_ms;
    const char *key;
    char key_buf[32];
    size_t max_output;
    bool output_tail;                /* keep only the last max_output bytes, no marker */
};

/* Frees what exec_parse allocated. */
static void exec_request_free(struct exec_request *req)
{
    if (req->argv)
        free(req->argv);
    if (req->envp) {
        for (char **e = req->envp; *e; e++)
            free(*e);
        free(req->envp);
    }
    free(req->stdin_data);
}

/* The egress proxy's variables (network open or allowlist): proxy-aware clients reach the
 * outside through it; localhost stays direct (the sandbox's own loopback). */
static void add_proxy_env(json_t *merged)
{
    static const char *names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", EGRESS_PORT);
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(merged, names[i], json_string(url));
    json_object_set_new(merged, "NO_PROXY", json_string("localhost,127.0.0.1,::1"));
    json_object_set_new(merged, "no_proxy", json_string("localhost,127.0.0.1,::1"));
}

/* Builds envp: the protocol's base environment overlaid with the request's env. */
static bool build_env(struct exec_request *req, json_t *env, bool proxy, struct api_error *err)
{
    static const char *base[][2] = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                    {"HOME", "/workspace"},
                                    {"LANG", "C.UTF-8"},
                                    {"TMPDIR", "/tmp"}};
    json_t *merged = json_object();
    for (size_t i = 0; i < 4; i++)
        json_object_set_new(merged, base[i][0], json_string(base[i][1]));
    if (proxy)
        add_proxy_env(merged);
    if (env) {
        const char *name;
        json_t *value;
        json_object_foreach(env, name, value) {
            if (!*name || strchr(name, '=')) {
                api_error_set(err, 400, "bad_request", "env name \"%s\" is invalid", name);
                json_decref(merged);
                return false;
            }
        }
        json_object_update(merged, env);
    }
    size_t n = json_object_size(merged), i = 0;
    const char *name;
    json_t *value;
    req->envp = calloc(n + 1, sizeof(char *));
    json_object_foreach(merged, name, value) {
        req->envp[i] = xasprintf("%s=%s", name, json_string_value(value));
        if (strcmp(name, "PATH") == 0)
            req->path_env = req->envp[i] + 5;
        i++;
    }
    json_decref(merged);
    return true;
}

/* exec_key: a string, or an integer taken as its decimal text. */
static bool parse_exec_key(json_t *body, struct exec_request *req, struct api_error *err)
{
    json_t *v = json_object_get(body, "exec_key");
    if (json_is_integer(v)) {
        snprintf(req->key_buf, sizeof req->key_buf, "%lld", (long long)json_integer_value(v));
        req->key = req->key_buf;
        return true;
    }
    return json_get_string(body, "exec_key", &req->key, err);
}

/* Validates the exec body against protocol.md; fills REQ or ERR. */
static bool exec_parse(struct workspace *ws, json_t *body, struct exec_request *req,
                       struct api_error *err)
{
    json_t *argv = json_object_get(body, "argv"), *env = NULL;
    const char *stdin_b64 = NULL, *output = NULL;
    uint64_t max_output = g_config.max_output_bytes;
    memset(req, 0, sizeof *req);
    req->dir = ".";
    req->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (!json_is_array(argv) || json_array_size(argv) == 0) {
        api_error_set(err, 400, "bad_request", "field \"argv\" must be a non-empty array");
        return false;
    }
    req->argv = calloc(json_array_size(argv) + 1, sizeof(char *));
    for (size_t i = 0; i < json_array_size(argv); i++) {
        json_t *a = json_array_get(argv, i);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a)) {
            api_error_set(err, 400, "bad_request", "field \"argv\" must hold NUL-free strings");
            return false;
        }
        req->argv[i] = (char *)json_string_value(a);
    }
    if (!json_get_string(body, "dir", &req->dir, err) ||
        !json_get_object(body, "env", &env, err) ||
        (env && !json_string_map_valid(env, "env", err)) ||
        !json_get_string(body, "stdin_b64", &stdin_b64, err) ||
        !json_get_uint(body, "timeout_ms", &req->timeout_ms, err) ||
        !parse_exec_key(body, req, err) ||
        !json_get_uint(body, "max_output_bytes", &max_output, err) ||
        !json_get_string(body, "output", &output, err) ||
        !build_env(req, env, egress_wanted(ws), err))
        return false;
    if (!*req->dir)
        req->dir = ".";
    if (output && strcmp(output, "tail") != 0 && strcmp(output, "head_tail") != 0) {
        api_error_set(err, 400, "bad_request", "field \"output\" must be \"head_tail\" or \"tail\"");
        return false;
    }
    req->output_tail = output && strcmp(output, "tail") == 0;
    size_t cap = req->output_tail ? g_config.max_kept_output_bytes : g_config.max_output_bytes;
    req->max_output = max_output < cap ? max_output : cap;
    if (stdin_b64) {
        bool ok;
        req->stdin_data = base64_decode(stdin_b64, &req->stdin_len, &ok);
        req->has_stdin = true;
        if (!ok) {
            api_error_set(err, 400, "bad_request", "field \"stdin_b64\" is not valid base64");
            return false;
        }
    }
    return true;
}

/* ---- the run ---- */

/* Gives RUN groups of its own, a free slot of the workspace's: memory (so an OOM kill is
 * attributed to this exec only) and cpuacct (so its CPU counts every process, also those
 * killed unreaped). Past 64 concurrent execs they share the workspace's groups, are never
 * told oom and are metered by what their init reaped. When no other exec of the workspace
 * runs, starts a new peak-memory window: the reported peak is the workspace's since the
 * oldest exec still running began. */
static void exec_own_groups(struct workspace *ws, struct exec_run *run)
{
    pthread_mutex_lock(&ws->lock);
    run->slot = ~ws->exec_slots ? __builtin_ctzll(~ws->exec_slots) : -1;
    if (run->slot >= 0)
        ws->exec_slots |= 1ull << run->slot;
    bool alone = ws->execs == run && run->next == NULL;
    pthread_mutex_unlock(&ws->lock);
    if (run->slot >= 0) {
        run->memory_group_fd = cgroup_exec_group_open(CG_MEMORY, ws->id, run->slot,
                                                      &run->oom_kills_before);
        run->cpu_group_fd = cgroup_exec_group_open(CG_CPUACCT, ws->id, run->slot,
                                                   &run->cpu_ns_before);
    }
    if (run->memory_group_fd < 0 && ws->cgroup_fds[CG_MEMORY] >= 0)
        run->memory_group_fd = fcntl(ws->cgroup_fds[CG_MEMORY], F_DUPFD_CLOEXEC, 0);
    run->holder_oom_kills_before = cgroup_workspace_oom_kills(ws->id);
    if (alone)
        cgroup_peak_reset(ws->id);
}

/* After the exec's processes are reaped: its CPU time (run->cpu_ns) and whether the kernel
 * OOM-killed one of them, or the workspace's holder, which ends every process of the
 * workspace (the workspace's memory is then full of tmpfs pages); frees its slot. */
static bool exec_own_groups_end(struct workspace *ws, struct exec_run *run)
{
    if (run->slot < 0)
        return false;
    bool oom = cgroup_available(CG_MEMORY) &&
               (cgroup_exec_group_counter(CG_MEMORY, ws->id, run->slot) > run->oom_kills_before ||
                (cgroup_workspace_oom_kills(ws->id) > run->holder_oom_kills_before &&
                 !holder_running(ws)));
    if (run->cpu_group_fd >= 0)
        run->cpu_ns = (long long)(cgroup_exec_group_counter(CG_CPUACCT, ws->id, run->slot) -
                                  run->cpu_ns_before);
    pthread_mutex_lock(&ws->lock);
    ws->exec_slots &= ~(1ull << run->slot);
    pthread_mutex_unlock(&ws->lock);
    run->slot = -1;
    return oom;
}

/* Adds RUN to the workspace's running execs; exec_key_in_use if its key is taken. */
static bool exec_register(struct workspace *ws, struct exec_run *run, struct api_error *err)
{
    bool ok = true;
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r && run->key; r = r->next)
        if (r->key && strcmp(r->key, run->key) == 0)
            ok = false;
    if (ws->state != WS_RUNNING || ws->removed) {
        api_error_set(err, 409, "workspace_not_running", "workspace \"%s\" is not running",
                      ws->id);
        ok = false;
    } else if (!ok) {
        api_error_set(err, 409, "exec_key_in_use", "an exec with key \"%s\" is running",
                      run->key);
    } else {
        run->next = ws->execs;
        ws->execs = run;
    }
    pthread_mutex_unlock(&ws->lock);
    return ok;
}

/* Removes RUN from the workspace's running execs. */
static void exec_unregister(struct workspace *ws, struct exec_run *run)
{
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run **p = &ws->execs; *p; p = &(*p)->next)
        if (*p == run) {
            *p = run->next;
            break;
        }
    if (!ws->execs)
        pthread_cond_broadcast(&ws->execs_done);   /* a release may wait for this */
    pthread_mutex_unlock(&ws->lock);
}

/* Pipes for the command's stdio; the daemon keeps its ends, the init helper dups the others. */
static bool open_stdio(struct exec_run *run, bool has_stdin, int *stdin_w, int *out_r, int *err_r)
{
    int p[2];
    *stdin_w = -1;
    if (has_stdin) {
        if (pipe2(p, O_CLOEXEC) != 0)
            return false;
        run->child_stdin = p[0];
        *stdin_w = p[1];
        fcntl(*stdin_w, F_SETFL, O_NONBLOCK);
    } else {
        run->child_stdin = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (pipe2(p, O_CLOEXEC) != 0)
        return false;
    *out_r = p[0];
    run->child_stdout = p[1];
    if (pipe2(p, O_CLOEXEC) != 0)
        return false;
    *err_r = p[0];
    run->child_stderr = p[1];
    fcntl(*out_r, F_SETFL, O_NONBLOCK);   /* only the daemon's ends are non-blocking */
    fcntl(*err_r, F_SETFL, O_NONBLOCK);
    return run->child_stdin >= 0;
}

/* Closes a descriptor if open and marks it closed. */
static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Pumps stdin, collects stdout/stderr and enforces the timeout until the outer helper exits
 * (then everything in the exec's namespace is gone and the pipes hold the final bytes).
 * Decisions never read errno: the helpers share it with this thread. */
static void exec_supervise(struct exec_run *run, struct exec_request *req, int stdin_w, int out_r,
                           int err_r, struct capture *out, struct capture *errc)
{
    double deadline = monotonic_ms() + (double)req->timeout_ms;
    size_t stdin_done = 0;
    bool timed_out = false, helpers_killed = false;
    for (;;) {
        struct pollfd p[4] = {{.fd = run->outer_pidfd, .events = POLLIN},
                              {.fd = out_r, .events = POLLIN},
                              {.fd = err_r, .events = POLLIN},
                              {.fd = stdin_w, .events = POLLOUT}};
        double left = deadline - monotonic_ms();
        int wait_ms = timed_out ? 1000 : left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
        int n = poll(p, stdin_w >= 0 ? 4 : 3, wait_ms);
        if (n == 0 && !timed_out && monotonic_ms() >= deadline) {
            timed_out = true;
            exec_kill_tree(run, KILL_TIMEOUT);
        } else if (n == 0 && timed_out && !helpers_killed &&
                   monotonic_ms() >= deadline + 5000) {
            /* the tree should be gone by now: end the helper chain as well */
            syscall(SYS_pidfd_send_signal, run->outer_pidfd, SIGKILL, NULL, 0);
            helpers_killed = true;
        }
        if (p[1].revents)
            capture_read(out_r, out);
        if (p[2].revents)
            capture_read(err_r, errc);
        if (stdin_w >= 0 && p[3].revents) {
            ssize_t w = write(stdin_w, req->stdin_data + stdin_done, req->stdin_len - stdin_done);
            if (w > 0)
                stdin_done += (size_t)w;
            if (stdin_done == req->stdin_len || (p[3].revents & (POLLERR | POLLNVAL)))
                close_fd(&stdin_w);
        }
        if (p[0].revents) {
            capture_read(out_r, out);
            capture_read(err_r, errc);
            break;
        }
    }
    close_fd(&stdin_w);
}

/* Total bytes execve copies for argv and envp (strings with their NULs, plus pointers). */
static size_t exec_args_bytes(struct exec_run *run)
{
    size_t total = 0;
    for (char **a = run->argv; *a; a++)
        total += strlen(*a) + 1 + sizeof(char *);
    for (char **e = run->envp; *e; e++)
        total += strlen(*e) + 1 + sizeof(char *);
    return total;
}

/* The response's spawn_error: the command never started, and why, with a stable code, so
 * exit 127 is never mistaken for the command's own status (E2BIG is not "command not found"). */
static json_t *spawn_error_json(struct exec_run *run)
{
    char message[512];
    const char *code;
    int e = run->spawn_errno;
    if (run->spawn_in_dir) {
        code = "bad_dir";
        snprintf(message, sizeof message, "working directory \"%.200s\": %s", run->dir,
                 strerror(e));
    } else if (e == E2BIG) {
        code = "argument_list_too_long";
        snprintf(message, sizeof message,
                 "argument list too long: the arguments and environment of \"%.64s\" (%zu bytes) "
                 "exceed the kernel's limit (%d bytes for one argument, about a quarter of the "
                 "stack limit in all)", run->argv[0], exec_args_bytes(run), 32 * 4096);
    } else {
        code = e == ENOENT ? "command_not_found" : e == EACCES ? "permission_denied"
               : e == ENOEXEC ? "exec_format_error" : "exec_failed";
        snprintf(message, sizeof message, "cannot execute \"%.64s\": %s", run->argv[0],
                 e == ENOENT ? "command not found" : strerror(e));
    }
    return json_pack("{s:s,s:s}", "code", code, "message", message);
}

/*
 * Turns the finished run into the protocol's exec response: the output in
 * it as base64, or (RAW, output "tail") beside it as raw bytes.  NULL with
 * ERR set when out of memory.
 */
static json_t *exec_response(struct exec_run *run, struct capture *out, struct capture *errc,
                             double wall_ms, bool oom_killed, long long peak_bytes,
                             struct exec_output *raw, struct api_error *err)
{
    bool truncated = false;
    int reason = __atomic_load_n(&run->kill_reason, __ATOMIC_SEQ_CST);
    int exit_code = 137, signal_number = SIGKILL;
    if (run->command_done && WIFEXITED(run->command_status)) {
        exit_code = WEXITSTATUS(run->command_status);
        signal_number = 0;
    } else if (run->command_done && WIFSIGNALED(run->command_status)) {
        signal_number = WTERMSIG(run->command_status);
        exit_code = 128 + signal_number;
    } else if (run->init_reaped && reason == KILL_NONE && WIFEXITED(run->init_status)) {
        exit_code = WEXITSTATUS(run->init_status);   /* setup failed before the command */
        signal_number = 0;
    }
    double cpu_ms = run->cpu_ns >= 0 ? (double)run->cpu_ns / 1e6
                  : run->init_usage.ru_utime.tv_sec * 1e3 + run->init_usage.ru_utime.tv_usec / 1e3 +
                    run->init_usage.ru_stime.tv_sec * 1e3 + run->init_usage.ru_stime.tv_usec / 1e3;
    json_t *resp = json_pack(
        "{s:i,s:o,s:I,s:I,s:f,s:o,s:b,s:b,s:b}", "exit_code", exit_code, "signal",
        signal_number ? json_integer(signal_number) : json_null(), "stdout_bytes",
        (json_int_t)out->total, "stderr_bytes", (json_int_t)errc->total, "wall_ms",
        (double)(long long)(wall_ms * 1000) / 1000, "cpu_ms",
        json_number_or_null(g_caps.compute_metering && run->init_reaped,
                            (double)(long long)(cpu_ms * 1000) / 1000),
        "timed_out", reason == KILL_TIMEOUT, "oom_killed", oom_killed, "killed",
        reason == KILL_REQUEST || reason == KILL_RELEASE);
    if (resp && raw) {
        if (!capture_finish_raw(out, errc, resp, raw, &truncated)) {
            json_decref(resp);
            resp = NULL;
        }
    } else {
        char *out_b64 = capture_finish(out, &truncated);
        char *err_b64 = capture_finish(errc, &truncated);
        if (resp) {
            json_object_set_new(resp, "stdout_b64", json_string(out_b64));
            json_object_set_new(resp, "stderr_b64", json_string(err_b64));
        }
        free(out_b64);
        free(err_b64);
    }
    if (!resp) {
        api_error_from_errno(err, ENOMEM, "cannot answer the exec");
        return NULL;
    }
    json_object_set_new(resp, "truncated", json_boolean(truncated));
    json_object_set_new(resp, "memory_peak_bytes",
                        peak_bytes >= 0 ? json_integer(peak_bytes) : json_null());
    if (run->spawn_errno)
        json_object_set_new(resp, "spawn_error", spawn_error_json(run));
    return resp;
}

/* One log line for execs that did not simply finish: timeouts, kills, OOM kills. */
static void log_exec_end(struct workspace *ws, struct exec_run *run, bool oom, double wall_ms)
{
    static const char *reasons[] = {NULL, "timed out", "killed by request", "killed by release"};
    int reason = __atomic_load_n(&run->kill_reason, __ATOMIC_SEQ_CST);
    if (reason != KILL_NONE || oom)
        log_event("workspace %s: exec%s%s %s after %.0f ms", ws->id, run->key ? " " : "",
                  run->key ? run->key : "", reason ? reasons[reason] : "hit the memory limit",
                  wall_ms);
}

/* Starts the helper chain and supervises it; returns the response or sets ERR. */
static json_t *exec_spawn_and_wait(struct workspace *ws, struct exec_run *run,
                                   struct exec_request *req, struct exec_output *raw,
                                   struct api_error *err)
{
    int stdin_w = -1, out_r = -1, err_r = -1;
    struct capture out, errc;
    json_t *resp = NULL;
    double start = monotonic_ms();
    run->stacks = mmap(NULL, 4 * HELPER_STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    pid_t outer = -1;
    if (run->stacks != MAP_FAILED && open_stdio(run, req->has_stdin, &stdin_w, &out_r, &err_r))
        outer = clone(exec_outer_stage, run->stacks + HELPER_STACK_BYTES,
                      HELPER_CLONE_VM | CLONE_FILES | CLONE_PIDFD | SIGCHLD, run,
                      &run->outer_pidfd);
    if (outer < 0) {
        api_error_set(err, 500, "spawn_failed", "cannot start the exec: %s", strerror(errno));
    } else {
        capture_init(&out, req->max_output, req->output_tail);
        capture_init(&errc, req->max_output, req->output_tail);
        exec_supervise(run, req, stdin_w, out_r, err_r, &out, &errc);
        stdin_w = -1;
        while (waitpid(outer, NULL, __WALL) < 0 && errno == EINTR)
            ;
        double wall = monotonic_ms() - start;
        if (!run->init_reaped && run->failed_step && !kill_requested(run) &&
            !holder_running(ws)) {
            api_error_set(err, 409, "workspace_not_running",
                          "workspace \"%s\" lost its sandbox; acquire restarts it", ws->id);
            log_event("workspace %s: holder is gone", ws->id);
            free(capture_finish(&out, &(bool){false}));
            free(capture_finish(&errc, &(bool){false}));
        } else if (!run->init_reaped && run->failed_step && !kill_requested(run)) {
            api_error_set(err, 500, "spawn_failed", "cannot enter the workspace (%s: %s)",
                          run->failed_step, strerror(run->failed_errno));
            log_event("workspace %s: exec failed at %s: %s", ws->id, run->failed_step,
                      strerror(run->failed_errno));
            free(capture_finish(&out, &(bool){false}));
            free(capture_finish(&errc, &(bool){false}));
        } else {
            bool oom = exec_own_groups_end(ws, run);
            log_exec_end(ws, run, oom, wall);
            resp = exec_response(run, &out, &errc, wall, oom, cgroup_peak_bytes(ws->id),
                                 req->output_tail ? raw : NULL, err);
        }
    }
    close_fd(&stdin_w);
    close_fd(&out_r);
    close_fd(&err_r);
    close_fd(&run->child_stdin);
    close_fd(&run->child_stdout);
    close_fd(&run->child_stderr);
    if (run->stacks != MAP_FAILED)
        munmap(run->stacks, 4 * HELPER_STACK_BYTES);
    exec_own_groups_end(ws, run);
    return resp;
}

/* A zeroed exec_run the helpers can write into: ordinary memory when they share ours, a
 * shared mapping when they run on a copy (HELPER_CLONE_VM 0). NULL when out of memory. */
static struct exec_run *exec_run_alloc(void)
{
    if (HELPER_CLONE_VM)
        return calloc(1, sizeof(struct exec_run));
    void *p = mmap(NULL, sizeof(struct exec_run), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Frees what exec_run_alloc returned. */
static void exec_run_free(struct exec_run *run)
{
    if (HELPER_CLONE_VM)
        free(run);
    else
        munmap(run, sizeof *run);
}

/*
 * POST /v1/workspaces/{id}/exec.  With output "tail" the kept output is
 * left in RAW (stdout then stderr), for the body after the JSON document.
 */
json_t *exec_run_request(struct workspace *ws, json_t *body, struct exec_output *raw,
                         struct api_error *err)
{
    struct exec_request req;
    struct exec_run *run;
    json_t *resp = NULL;
    uint64_t denial_seq = 0;
    struct egress *eg;
    if (!exec_parse(ws, body, &req, err)) {
        exec_request_free(&req);
        return NULL;
    }
    run = exec_run_alloc();
    if (!run) {
        api_error_from_errno(err, ENOMEM, "cannot start the exec");
        exec_request_free(&req);
        return NULL;
    }
    run->ws = ws;
    run->key = req.key ? strdup(req.key) : NULL;
    run->argv = req.argv;
    run->envp = req.envp;
    run->dir = req.dir;
    run->path_env = req.path_env;
    run->outer_pidfd = run->init_pidfd = -1;
    run->child_stdin = run->child_stdout = run->child_stderr = -1;
    eg = egress_mark(ws, &denial_seq);
    run->memory_group_fd = run->cpu_group_fd = run->slot = -1;
    run->cpu_ns = -1;
    if (exec_register(ws, run, err)) {
        exec_own_groups(ws, run);
        resp = exec_spawn_and_wait(ws, run, &req, raw, err);
        close_fd(&run->memory_group_fd);
        close_fd(&run->cpu_group_fd);
        exec_unregister(ws, run);
    }
    /* the proxy's refusals while this exec ran (also those of concurrent execs) */
    json_t *denials = egress_denials_since(eg, denial_seq);
    if (resp)
        json_object_set(resp, "egress_denials", denials);
    json_decref(denials);
    close_fd(&run->outer_pidfd);
    close_fd(&run->init_pidfd);
    free(run->key);
    exec_run_free(run);
    exec_request_free(&req);
    return resp;
}

/* Kill call: SIGKILLs the tree of the running exec with KEY; false when none runs. */
bool exec_kill_by_key(struct workspace *ws, const char *key)
{
    bool found = false;
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r; r = r->next)
        if (r->key && strcmp(r->key, key) == 0) {
            exec_kill_tree(r, KILL_REQUEST);
            found = true;
        }
    pthread_mutex_unlock(&ws->lock);
    return found;
}

/* Release: SIGKILLs the trees of every running exec of the workspace. */
void exec_kill_all(struct workspace *ws)
{
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r; r = r->next)
        exec_kill_tree(r, KILL_RELEASE);
    pthread_mutex_unlock(&ws->lock);
}
