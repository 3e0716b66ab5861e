/*
 * exec.c - run one command in a warm workspace through its exec agent.
 *
 * Every workspace's holder is its exec agent (agent.c), resident inside all of the
 * workspace's namespaces, cgroups and system-call filter. An exec is one message to it
 * (agent_proto.h): the request with the exec's own socket, the command's pipes, its payload
 * and its own cgroups; the agent starts the command in a fresh pid namespace below its own and
 * answers on the exec's socket with the statuses once the namespace's init is reaped. Writing
 * to that socket (timeout, kill call, release) makes the agent SIGKILL the init. The per-exec
 * pid namespace gives the protocol's tree semantics for free: when its init exits (right
 * after the command) or is killed, the kernel kills everything left in the namespace,
 * double-forked daemons included.
 *
 * The exec's socket closing before the answer means the agent is gone, which happens only
 * with the whole sandbox (it is the sandbox's pid 1): the exec is answered at once, never
 * waited for.
 *
 * A background exec ("background": true) is answered 202 once the agent has it; a thread of
 * its own then supervises it exactly like a foreground exec (the same loop, the same end), its
 * output going to its record (background.c) instead of a capture, read only while the record
 * has room, so a command nobody fetches from blocks on write instead of losing bytes.
 */
#include "exec.h"
#include "exec_request.h"
#include "background.h"
#include "capture.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "json.h"
#include "log.h"
#include "quota.h"
#include "registry.h"
#include "sandbox.h"
#include "util.h"
#include "agent_proto.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum kill_reason { KILL_NONE, KILL_TIMEOUT, KILL_REQUEST, KILL_RELEASE };

/* How the agent's answers ended. */
enum exec_outcome { OUTCOME_PENDING, OUTCOME_DONE, OUTCOME_FAILED, OUTCOME_AGENT_LOST,
                    OUTCOME_NO_ANSWER };

struct exec_run {
    struct exec_run *next;
    struct workspace *ws;
    char *key;
    int kill_reason;                 /* enum kill_reason, first one wins (atomic) */
    int signalled;                   /* a kill call sent a forwarded signal (atomic) */
    uint64_t timeout_ms;             /* the request's timeout */
    uint64_t extended_ms;            /* added to it by extend calls (under ws->lock) */
    struct background *bg;           /* a background exec's record, NULL for a foreground one */
    char **argv, **envp;
    const char *dir;
    int child_stdin, child_stdout, child_stderr;  /* the command's ends, sent to the agent */
    int socket_fd;                   /* the daemon's end of the exec's socket */
    int agent_end;                   /* the other end, until it is sent to the agent */
    int slot;                        /* the exec's own groups (exec-<slot>), -1 if none */
    int memory_group_fd;             /* their cgroup.procs, -1 without the controller */
    int cpu_group_fd;
    uint64_t oom_kills_before;       /* their counters when the exec began */
    uint64_t holder_oom_kills_before; /* the workspace group's (the holder's) */
    uint64_t cpu_ns_before;
    long long cpu_ns;                /* the exec's CPU by its cpuacct group, -1 if unknown */
    enum exec_outcome outcome;
    struct agent_reply answer;       /* the agent's AGENT_DONE or AGENT_FAILED */
};

/* Whether the daemon decided to end this exec. */
static bool kill_requested(struct exec_run *run)
{
    return __atomic_load_n(&run->kill_reason, __ATOMIC_SEQ_CST) != KILL_NONE;
}

/* Has the agent send forwarded signal SIG (agent_proto.h) to every process of the exec's tree;
 * the command may end by it or not. */
static void exec_signal_tree(struct exec_run *run, int sig)
{
    unsigned char byte = (unsigned char)sig;
    __atomic_store_n(&run->signalled, 1, __ATOMIC_SEQ_CST);
    send(run->socket_fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Has the agent SIGKILL the exec's tree (its init, pid 1 of the exec's namespace): one byte
 * on the exec's socket, which exists from before the exec is registered until after it is
 * unregistered. A request the agent has not read yet is killed as soon as it starts. */
static void exec_kill_tree(struct exec_run *run, enum kill_reason reason)
{
    int expected = KILL_NONE;
    __atomic_compare_exchange_n(&run->kill_reason, &expected, reason, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    /* fails when agent and tree are gone */
    send(run->socket_fd, &(char){AGENT_KILL_BYTE}, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- the run ---- */

/* Gives RUN groups of its own, a free slot of the workspace's: memory (so an OOM kill is
 * attributed to this exec only) and cpuacct (so its CPU counts every process, also those
 * killed unreaped). Past 64 concurrent execs they share the workspace's groups, are never
 * told oom and are metered by what their init reaped. A slot's counters are read when its
 * groups are first used and at the end of every exec in it (nothing runs in them between
 * execs), so an exec begins without reading them. When no other exec of the workspace runs,
 * starts a new peak-memory window: the reported peak is the workspace's since the oldest exec
 * still running began. */
static void exec_own_groups(struct workspace *ws, struct exec_run *run)
{
    pthread_mutex_lock(&ws->lock);
    run->slot = ~ws->exec_slots ? __builtin_ctzll(~ws->exec_slots) : -1;
    bool known = run->slot >= 0 && (ws->exec_slots_known & (1ull << run->slot));
    if (run->slot >= 0)
        ws->exec_slots |= 1ull << run->slot;
    bool alone = ws->execs == run && run->next == NULL;
    pthread_mutex_unlock(&ws->lock);
    if (run->slot >= 0) {
        run->memory_group_fd = cgroup_exec_group_open(CG_MEMORY, ws->id, run->slot, !known);
        run->cpu_group_fd = cgroup_exec_group_open(CG_CPUACCT, ws->id, run->slot, !known);
        run->oom_kills_before = known ? ws->slot_oom_kills[run->slot]
                              : cgroup_exec_group_counter(CG_MEMORY, ws->id, run->slot);
        run->cpu_ns_before = known ? ws->slot_cpu_ns[run->slot]
                           : cgroup_exec_group_counter(CG_CPUACCT, ws->id, run->slot);
    }
    if (run->memory_group_fd < 0 && ws->cgroup_fds[CG_MEMORY] >= 0)
        run->memory_group_fd = fcntl(ws->cgroup_fds[CG_MEMORY], F_DUPFD_CLOEXEC, 0);
    run->holder_oom_kills_before = cgroup_workspace_oom_kills(ws->cgroup_fds);
    if (alone)
        cgroup_peak_reset(ws->cgroup_fds);
}

/* After the exec's processes are reaped: its CPU time (run->cpu_ns) and whether the kernel
 * OOM-killed one of them, or the workspace's holder, which ends every process of the
 * workspace (the workspace's memory is then full of tmpfs pages); keeps the slot's counters
 * for its next exec and frees it. */
static bool exec_own_groups_end(struct workspace *ws, struct exec_run *run)
{
    if (run->slot < 0)
        return false;
    uint64_t oom_kills = cgroup_exec_group_counter(CG_MEMORY, ws->id, run->slot);
    uint64_t cpu_ns = cgroup_exec_group_counter(CG_CPUACCT, ws->id, run->slot);
    bool oom = cgroup_available(CG_MEMORY) &&
               (oom_kills > run->oom_kills_before ||
                (cgroup_workspace_oom_kills(ws->cgroup_fds) > run->holder_oom_kills_before &&
                 !holder_running(ws)));
    if (run->cpu_group_fd >= 0)
        run->cpu_ns = (long long)(cpu_ns - run->cpu_ns_before);
    ws->slot_oom_kills[run->slot] = oom_kills;
    ws->slot_cpu_ns[run->slot] = cpu_ns;
    pthread_mutex_lock(&ws->lock);
    ws->exec_slots &= ~(1ull << run->slot);
    ws->exec_slots_known |= 1ull << run->slot;
    pthread_mutex_unlock(&ws->lock);
    run->slot = -1;
    return oom;
}

/* Adds RUN to the workspace's running execs (and a background exec's record to its records);
 * exec_key_in_use if its key names a running exec or a record not yet forgotten. */
static bool exec_register(struct workspace *ws, struct exec_run *run, struct api_error *err)
{
    bool ok = true;
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r && run->key; r = r->next)
        if (r->key && strcmp(r->key, run->key) == 0)
            ok = false;
    if (run->key && background_key_taken_locked(ws, run->key))
        ok = false;
    if (ws->state != WS_RUNNING || ws->removed) {
        api_error_set(err, 409, "workspace_not_running", "workspace \"%s\" is not running",
                      ws->id);
        ok = false;
    } else if (!ok) {
        api_error_set(err, 409, "exec_key_in_use", "an exec with key \"%s\" is running, or "
                      "a background one with it is not forgotten yet", run->key);
    } else if (run->bg && background_count_locked(ws) >= g_config.max_background_execs) {
        /* each record may hold --background-buffer-bytes per stream: their number is bounded */
        api_error_set(err, 429, "too_many_background_execs", "workspace \"%s\" already has %zu "
                      "background execs (running, or ended and not forgotten; at most %zu)",
                      ws->id, background_count_locked(ws), g_config.max_background_execs);
        ok = false;
    } else {
        run->next = ws->execs;
        ws->execs = run;
        if (run->bg)
            background_link_locked(ws, run->bg);
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

/* Pipes for the command's stdio; the daemon keeps its ends and sends the others to the agent. */
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

/* Appends the NUL-terminated strings of LIST to BUF at *POS. */
static void payload_put(char *buf, size_t *pos, char **list)
{
    for (; *list; list++) {
        size_t len = strlen(*list) + 1;
        memcpy(buf + *pos, *list, len);
        *pos += len;
    }
}

/* The payload (working directory, argv, envp as NUL-terminated strings) in one allocation;
 * counts and length go into REQ. NULL when out of memory. */
static char *exec_payload(struct exec_run *run, struct agent_request *req)
{
    size_t total = strlen(run->dir) + 1, pos = total;
    for (char **a = run->argv; *a; a++, req->argc++)
        total += strlen(*a) + 1;
    for (char **e = run->envp; *e; e++, req->envc++)
        total += strlen(*e) + 1;
    char *buf = malloc(total);
    if (buf) {
        memcpy(buf, run->dir, pos);
        payload_put(buf, &pos, run->argv);
        payload_put(buf, &pos, run->envp);
        req->payload_len = total;
    }
    return buf;
}

/* A memfd holding the LEN bytes of a payload too large to travel inside the request; -1 with
 * errno on failure. */
static int exec_payload_fd(const char *payload, size_t len)
{
    int fd = memfd_create("mesh-exec", MFD_CLOEXEC);
    size_t done = 0;
    while (fd >= 0 && done < len) {
        ssize_t w = write(fd, payload + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int error = w < 0 ? errno : EIO;
            close_fd(&fd);
            errno = error;
        } else {
            done += (size_t)w;
        }
    }
    return fd;
}

/* Sends the exec to the workspace's agent: the request, the exec socket's other end, the
 * payload (inside the message, or in a memfd when large) and the command's pipes and groups
 * (agent_proto.h). False with errno when the agent cannot take it (gone: EPIPE or
 * ECONNREFUSED). */
static bool exec_send(struct workspace *ws, struct exec_run *run)
{
    struct agent_request req = {.magic = AGENT_MAGIC, .version = AGENT_PROTOCOL};
    int payload_fd = -1, fds[AGENT_MAX_FDS], nfds = 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(AGENT_MAX_FDS * sizeof(int))];
    } control;
    char *payload = exec_payload(run, &req);
    bool inline_payload = req.payload_len <= AGENT_INLINE_MAX;
    if (!inline_payload && payload)
        payload_fd = exec_payload_fd(payload, req.payload_len);
    if (!payload || (!inline_payload && payload_fd < 0)) {
        int error = payload ? errno : ENOMEM;
        free(payload);
        errno = error;
        return false;
    }
    fds[nfds++] = run->agent_end;
    fds[nfds++] = run->child_stdin;
    fds[nfds++] = run->child_stdout;
    fds[nfds++] = run->child_stderr;
    if (inline_payload)
        req.flags |= AGENT_INLINE;
    else
        fds[nfds++] = payload_fd;
    if (run->cpu_group_fd >= 0) {
        req.flags |= AGENT_CPU_GROUP;
        fds[nfds++] = run->cpu_group_fd;
    }
    if (run->memory_group_fd >= 0) {
        req.flags |= AGENT_MEMORY_GROUP;
        fds[nfds++] = run->memory_group_fd;
    }
    memset(&control, 0, sizeof control);
    struct iovec iov[2] = {{.iov_base = &req, .iov_len = sizeof req},
                           {.iov_base = payload, .iov_len = inline_payload ? req.payload_len : 0}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    ssize_t sent;
    while ((sent = sendmsg(ws->agent_fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    int error = sent < 0 ? errno : EPROTO;
    size_t expected = sizeof req + (inline_payload ? req.payload_len : 0);
    free(payload);
    close_fd(&run->agent_end);   /* the agent has its own copies now */
    close_fd(&payload_fd);
    close_fd(&run->child_stdin);
    close_fd(&run->child_stdout);
    close_fd(&run->child_stderr);
    errno = error;
    return sent == (ssize_t)expected;
}

/* Reads the agent's answer from the exec's socket into RUN and sets run->outcome. An answer
 * that does not parse counts as the agent being gone. */
static void exec_take_answer(struct exec_run *run)
{
    struct agent_reply reply;
    /* MSG_TRUNC: the whole message's length; descriptors sent along are dropped */
    ssize_t n = recv(run->socket_fd, &reply, sizeof reply, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 || !agent_reply_valid(&reply, (size_t)n)) {
        run->outcome = OUTCOME_AGENT_LOST;
    } else {
        run->answer = reply;
        run->outcome = reply.kind == AGENT_DONE ? OUTCOME_DONE : OUTCOME_FAILED;
    }
}

/* One exec from its request to its answer: what a foreground request and a background
 * exec's supervisor thread share. */
struct exec_job {
    struct workspace *ws;            /* a background job holds a reference of its own */
    struct exec_run *run;
    struct exec_request req;
    int stdin_w, out_r, err_r;       /* the daemon's ends of the command's pipes, -1 once closed */
    int send_errno;                  /* the agent could not take the exec: why */
    double start;                    /* monotonic ms */
    struct egress *eg;               /* the proxy whose refusals count from denial_seq on */
    uint64_t denial_seq;
    bool registered;
};

/* Where a running exec's output goes: the two captures of a foreground exec's answer, or a
 * background exec's record, which holds bytes until its client acknowledges them. */
struct exec_sink {
    struct capture *streams;         /* [2]: stdout, stderr; NULL for a background exec */
    struct background *bg;
};

/* Whether STREAM's pipe may be read now: a record full up waits for its client. */
static bool sink_room(struct exec_sink *sink, int stream)
{
    return !sink->bg || background_room(sink->bg, stream);
}

/* Reads what FD has for STREAM (past a record's cap once the exec ENDED); false at the pipe's
 * end (or when FD is closed already). */
static bool sink_read(struct exec_sink *sink, int stream, int fd, bool ended)
{
    if (fd < 0)
        return false;
    return sink->bg ? background_read(sink->bg, stream, fd, ended)
                    : capture_read(fd, &sink->streams[stream]);
}

/* Pumps stdin, collects stdout/stderr into SINK and enforces the timeout until the agent's
 * answer (after AGENT_DONE everything in the exec's namespace is gone and the pipes hold the
 * final bytes), or until the agent is gone. A pipe at its end is closed (never polled again). */
static void exec_supervise(struct exec_job *job, struct exec_sink *sink)
{
    struct exec_run *run = job->run;
    struct exec_request *req = &job->req;
    double deadline = job->start + (double)req->timeout_ms;
    size_t stdin_done = 0;
    bool timed_out = false;
    while (run->outcome == OUTCOME_PENDING) {
        struct pollfd p[5] = {{.fd = run->socket_fd, .events = POLLIN},
                              {.fd = sink_room(sink, 0) ? job->out_r : -1, .events = POLLIN},
                              {.fd = sink_room(sink, 1) ? job->err_r : -1, .events = POLLIN},
                              {.fd = job->stdin_w, .events = POLLOUT},
                              {.fd = sink->bg ? background_wake_fd(sink->bg) : -1,
                               .events = POLLIN}};
        double left = deadline - monotonic_ms();
        int wait_ms = timed_out ? 1000 : left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
        int n = poll(p, 5, wait_ms);
        if (n == 0 && !timed_out && monotonic_ms() >= deadline) {
            /* an extend call may have moved the deadline: it and the timeout's kill are decided
             * under the workspace's lock, so an extension that was answered is never lost */
            pthread_mutex_lock(&run->ws->lock);
            deadline = job->start + (double)req->timeout_ms + (double)run->extended_ms;
            if (monotonic_ms() >= deadline) {
                timed_out = true;
                exec_kill_tree(run, KILL_TIMEOUT);
            }
            pthread_mutex_unlock(&run->ws->lock);
        } else if (n == 0 && !timed_out) {
            pthread_mutex_lock(&run->ws->lock);
            deadline = job->start + (double)req->timeout_ms + (double)run->extended_ms;
            pthread_mutex_unlock(&run->ws->lock);
        } else if (n == 0 && timed_out && monotonic_ms() >= deadline + 5000) {
            run->outcome = OUTCOME_NO_ANSWER;   /* killed, yet never reported: give up */
        }
        if (p[1].revents && !sink_read(sink, 0, job->out_r, false))
            close_fd(&job->out_r);
        if (p[2].revents && !sink_read(sink, 1, job->err_r, false))
            close_fd(&job->err_r);
        if (p[3].revents) {
            ssize_t w = write(job->stdin_w, req->stdin_data + stdin_done,
                              req->stdin_len - stdin_done);
            if (w > 0)
                stdin_done += (size_t)w;
            if (stdin_done == req->stdin_len || (p[3].revents & (POLLERR | POLLNVAL)))
                close_fd(&job->stdin_w);
        }
        if (p[4].revents)
            background_wake_clear(sink->bg);
        if (p[0].revents)
            exec_take_answer(run);
    }
    sink_read(sink, 0, job->out_r, true);
    sink_read(sink, 1, job->err_r, true);
    close_fd(&job->stdin_w);
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
    int e = run->answer.spawn_errno;
    if (run->answer.spawn_in_dir) {
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
 * The end fields of a finished run (exit status, flags, metering, totals; docs/protocol.md),
 * shared by a foreground exec's answer and a background exec's record. A run the agent never
 * started (killed before it could) reads as killed with 137; killed is true when a kill call,
 * release or drain ended it, or a kill call's signal did.
 */
static json_t *exec_end_fields(struct exec_run *run, uint64_t stdout_total, uint64_t stderr_total,
                               double wall_ms, bool oom_killed, long long peak_bytes)
{
    bool reaped = run->outcome == OUTCOME_DONE;
    const struct agent_reply *a = &run->answer;
    int reason = __atomic_load_n(&run->kill_reason, __ATOMIC_SEQ_CST);
    int exit_code = 137, signal_number = SIGKILL;
    if (reaped && a->command_done && WIFEXITED(a->command_status)) {
        exit_code = WEXITSTATUS(a->command_status);
        signal_number = 0;
    } else if (reaped && a->command_done && WIFSIGNALED(a->command_status)) {
        signal_number = WTERMSIG(a->command_status);
        exit_code = 128 + signal_number;
    } else if (reaped && reason == KILL_NONE && WIFEXITED(a->init_status)) {
        exit_code = WEXITSTATUS(a->init_status);   /* setup failed before the command */
        signal_number = 0;
    }
    bool killed = reason == KILL_REQUEST || reason == KILL_RELEASE ||
                  (__atomic_load_n(&run->signalled, __ATOMIC_SEQ_CST) && signal_number != 0);
    double cpu_ms = run->cpu_ns >= 0 ? (double)run->cpu_ns / 1e6 : (double)a->cpu_us / 1e3;
    json_t *resp = json_pack(
        "{s:i,s:o,s:I,s:I,s:f,s:o,s:b,s:b,s:b,s:o}", "exit_code", exit_code, "signal",
        signal_number ? json_integer(signal_number) : json_null(), "stdout_bytes",
        (json_int_t)stdout_total, "stderr_bytes", (json_int_t)stderr_total, "wall_ms",
        (double)(long long)(wall_ms * 1000) / 1000, "cpu_ms",
        json_number_or_null(g_caps.compute_metering && reaped,
                            (double)(long long)(cpu_ms * 1000) / 1000),
        "timed_out", reason == KILL_TIMEOUT, "oom_killed", oom_killed, "killed", killed,
        "memory_peak_bytes", peak_bytes >= 0 ? json_integer(peak_bytes) : json_null());
    if (resp && reaped && a->spawn_errno)
        json_object_set_new(resp, "spawn_error", spawn_error_json(run));
    return resp;
}

/*
 * Adds a foreground exec's output to its answer RESP: as base64 inside it, or (RAW, output
 * "tail") beside it as raw bytes; frees the captures. NULL with ERR when out of memory.
 */
static json_t *exec_add_output(json_t *resp, struct capture *out, struct capture *errc,
                               struct exec_output *raw, struct api_error *err)
{
    bool truncated = false;
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

/* The error of an exec the agent did not carry to its end (and was not told to end): the
 * sandbox is gone (acquire restarts it), or the agent refused or never answered. */
static void exec_failure(struct workspace *ws, struct exec_run *run, int send_errno,
                         struct api_error *err)
{
    bool gone = run->outcome == OUTCOME_AGENT_LOST ? holder_ends_within(ws, 2000)
                                                   : !holder_running(ws);
    if (gone) {
        api_error_set(err, 409, "workspace_not_running", "workspace \"%s\" lost its sandbox%s; "
                      "acquire restarts it", ws->id,
                      run->outcome == OUTCOME_AGENT_LOST ? " while the command ran" : "");
        log_event("workspace %s: holder is gone", ws->id);
    } else if (send_errno) {
        api_error_set(err, 500, "spawn_failed", "cannot reach the workspace's exec agent: %s",
                      strerror(send_errno));
        log_event("workspace %s: cannot reach the exec agent: %s", ws->id, strerror(send_errno));
    } else if (run->outcome == OUTCOME_FAILED) {
        api_error_set(err, 500, "spawn_failed", "cannot start the command in the workspace "
                      "(%s: %s)", agent_step_name(run->answer.failed_step),
                      strerror(run->answer.failed_errno));
        log_event("workspace %s: exec failed at %s: %s", ws->id,
                  agent_step_name(run->answer.failed_step), strerror(run->answer.failed_errno));
    } else {
        api_error_set(err, 500, "spawn_failed", "the workspace's exec agent %s",
                      run->outcome == OUTCOME_NO_ANSWER ? "did not answer"
                                                        : "broke off the exec");
        log_event("workspace %s: the exec agent %s", ws->id,
                  run->outcome == OUTCOME_NO_ANSWER ? "did not answer" : "broke off an exec");
    }
}

/* The pipes and the message to the agent. False with ERR when the pipes cannot be made; a
 * message the agent cannot take leaves job->send_errno for exec_conclude. */
static bool exec_launch(struct exec_job *job, struct api_error *err)
{
    job->start = monotonic_ms();
    if (!open_stdio(job->run, job->req.has_stdin, &job->stdin_w, &job->out_r, &job->err_r)) {
        api_error_from_errno(err, errno, "cannot start the exec");
        return false;
    }
    if (!exec_send(job->ws, job->run))
        job->send_errno = errno;
    return true;
}

/* Supervises a launched exec to its end; returns its end fields (with the output for a
 * foreground SINK, raw into RAW for output "tail"), or NULL with ERR when the agent did not
 * carry it to its end. */
static json_t *exec_conclude(struct exec_job *job, struct exec_sink *sink,
                             struct exec_output *raw, struct api_error *err)
{
    struct workspace *ws = job->ws;
    struct exec_run *run = job->run;
    json_t *resp = NULL;
    if (job->send_errno == 0)
        exec_supervise(job, sink);
    double wall = monotonic_ms() - job->start;
    /* the sandbox OOM-killed under the command ends it like a kill: oom_killed, 137 */
    bool holder_oom =
        run->outcome == OUTCOME_AGENT_LOST && cgroup_available(CG_MEMORY) &&
        cgroup_workspace_oom_kills(ws->cgroup_fds) > run->holder_oom_kills_before &&
        holder_ends_within(ws, 2000);
    bool ended = run->outcome == OUTCOME_DONE || holder_oom ||
                 (run->outcome != OUTCOME_PENDING && kill_requested(run));
    uint64_t totals[2] = {0, 0};
    if (sink->streams) {
        totals[0] = sink->streams[0].total;
        totals[1] = sink->streams[1].total;
    }
    if (ended) {
        bool oom = exec_own_groups_end(ws, run);
        log_exec_end(ws, run, oom, wall);
        resp = exec_end_fields(run, totals[0], totals[1], wall, oom,
                               cgroup_peak_bytes(ws->cgroup_fds));
        /* the workspace at its disk quota when the command ended (quota.c) */
        if (resp)
            json_object_set_new(resp, "disk_quota", json_boolean(quota_full(ws->id)));
        if (sink->streams)
            resp = exec_add_output(resp, &sink->streams[0], &sink->streams[1],
                                   job->req.output_tail ? raw : NULL, err);
        else if (!resp)
            api_error_from_errno(err, ENOMEM, "cannot record the exec's end");
    } else {
        exec_failure(ws, run, job->send_errno, err);
    }
    if (sink->streams && !resp) {
        capture_free(&sink->streams[0]);
        capture_free(&sink->streams[1]);
    }
    exec_own_groups_end(ws, run);
    return resp;
}

/* A new job for BODY in WS, its run made and registered (exec_key_in_use and the like in ERR
 * otherwise, job->registered false). NULL when the body is invalid or memory runs out. */
static struct exec_job *exec_job_new(struct workspace *ws, json_t *body, struct api_error *err)
{
    struct exec_job *job = calloc(1, sizeof *job);
    struct exec_run *run = calloc(1, sizeof *run);
    if (!job || !run) {
        free(job);
        free(run);
        api_error_from_errno(err, ENOMEM, "cannot start the exec");
        return NULL;
    }
    job->ws = ws;
    job->run = run;
    job->stdin_w = job->out_r = job->err_r = -1;
    run->ws = ws;
    run->child_stdin = run->child_stdout = run->child_stderr = -1;
    run->memory_group_fd = run->cpu_group_fd = run->slot = -1;
    run->socket_fd = run->agent_end = -1;
    run->cpu_ns = -1;
    bool ok = exec_parse(ws, body, &job->req, err);
    run->key = ok && job->req.key ? strdup(job->req.key) : NULL;
    run->timeout_ms = job->req.timeout_ms;
    run->argv = job->req.argv;
    run->envp = job->req.envp;
    run->dir = job->req.dir;
    if (ok && job->req.background && !(run->bg = background_new(job->req.key))) {
        api_error_from_errno(err, ENOMEM, "cannot start the exec");
        ok = false;
    }
    job->eg = egress_mark(ws, &job->denial_seq);
    int pair[2] = {-1, -1};
    if (ok && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        api_error_from_errno(err, errno, "cannot start the exec");
        ok = false;
    }
    run->socket_fd = pair[0];
    run->agent_end = pair[1];
    job->registered = ok && exec_register(ws, run, err);
    if (job->registered)
        exec_own_groups(ws, run);
    return job;
}

/* The end of every exec: its pipes and groups closed, the proxy's refusals while it ran added
 * to RESP (when it is not an error), a background exec's record given its end (RESP, taken
 * over), and the run leaves the workspace's running execs, last, so that a release that waited
 * for it finds its record ended. Frees the job. */
static void exec_job_end(struct exec_job *job, json_t *resp)
{
    struct exec_run *run = job->run;
    close_fd(&job->stdin_w);
    close_fd(&job->out_r);
    close_fd(&job->err_r);
    close_fd(&run->child_stdin);
    close_fd(&run->child_stdout);
    close_fd(&run->child_stderr);
    close_fd(&run->memory_group_fd);
    close_fd(&run->cpu_group_fd);
    json_t *denials = egress_denials_since(job->eg, job->denial_seq);
    if (resp && !json_object_get(resp, "error"))
        json_object_set(resp, "egress_denials", denials);
    json_decref(denials);
    if (run->bg && job->registered)
        background_end(run->bg, resp);
    else if (run->bg)
        json_decref(resp);
    if (job->registered)
        exec_unregister(job->ws, run);
    close_fd(&run->socket_fd);
    close_fd(&run->agent_end);
    background_put(run->bg);
    free(run->key);
    free(run);
    exec_request_free(&job->req);
    free(job);
}

/* A background exec's supervisor thread: the exec to its end, the end into its record. */
static void *background_supervise(void *arg)
{
    struct exec_job *job = arg;
    struct workspace *ws = job->ws;
    struct api_error err = {0};
    struct exec_sink sink = {.bg = job->run->bg};
    json_t *end = exec_conclude(job, &sink, NULL, &err);
    if (!end)
        end = json_pack("{s:{s:s,s:s}}", "error", "code", err.code ? err.code : "internal",
                        "message", err.message);
    exec_job_end(job, end);
    workspace_put(ws);
    background_supervisor_count(-1);
    return NULL;
}

/* Hands a launched background exec to a supervisor thread of its own and answers 202's
 * document. Without a thread the exec is killed, its record dropped, and ERR says why. */
static json_t *exec_background_start(struct exec_job *job, struct api_error *err)
{
    pthread_t thread;
    pthread_attr_t attr;
    json_t *resp = json_pack("{s:s,s:b}", "exec_key", job->req.key, "background", 1);
    struct workspace *ws = job->ws;
    workspace_hold(ws);
    background_supervisor_count(1);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int error = resp ? pthread_create(&thread, &attr, background_supervise, job) : ENOMEM;
    pthread_attr_destroy(&attr);
    if (error == 0)
        return resp;
    json_decref(resp);
    exec_kill_tree(job->run, KILL_RELEASE);
    background_unlink(ws, job->run->bg);
    background_supervise(job);
    api_error_from_errno(err, error, "cannot supervise the background exec");
    return NULL;
}

/*
 * POST /v1/workspaces/{id}/exec.  With output "tail" the kept output is
 * left in RAW (stdout then stderr), for the body after the JSON document.
 * A background exec answers its 202 document ("background": true) as soon
 * as the agent has it.
 */
json_t *exec_run_request(struct workspace *ws, json_t *body, struct exec_output *raw,
                         struct api_error *err)
{
    struct capture streams[2];
    struct exec_sink sink = {.streams = streams};
    json_t *resp = NULL;
    struct exec_job *job = exec_job_new(ws, body, err);
    if (!job)
        return NULL;
    if (job->registered && exec_launch(job, err)) {
        if (job->req.background && job->send_errno == 0)
            return exec_background_start(job, err);
        if (job->run->bg)   /* the agent never had it: answered here, no record */
            background_unlink(ws, job->run->bg);
        capture_init(&streams[0], job->req.max_output, job->req.output_tail);
        capture_init(&streams[1], job->req.max_output, job->req.output_tail);
        resp = exec_conclude(job, &sink, raw, err);
    } else if (job->registered) {
        if (job->run->bg)
            background_unlink(ws, job->run->bg);
        exec_own_groups_end(ws, job->run);
    }
    exec_job_end(job, resp);
    return resp;
}

/* A kill call's body: {"signal": NAME} of agent_signal_forwarded's signals or KILL (the
 * default); bad_signal for anything else. */
bool exec_signal_parse(json_t *body, int *sig, struct api_error *err)
{
    static const struct { const char *name; int sig; } names[] = {
        {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP},
        {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
    const char *name = "KILL";
    if (body && !json_get_string(body, "signal", &name, err))
        return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *sig = names[i].sig;
            return true;
        }
    api_error_set(err, 400, "bad_signal", "signal \"%.64s\" is not one of TERM, INT, HUP, QUIT, "
                  "USR1, USR2, KILL", name);
    return false;
}

/* Kill call: SIG to the tree of the running exec with KEY (via its init); false if none. */
bool exec_kill_by_key(struct workspace *ws, const char *key, int sig)
{
    bool found = false;
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r; r = r->next)
        if (r->key && strcmp(r->key, key) == 0) {
            if (sig == SIGKILL)
                exec_kill_tree(r, KILL_REQUEST);
            else
                exec_signal_tree(r, sig);
            found = true;
        }
    pthread_mutex_unlock(&ws->lock);
    return found;
}

/* Extend call: moves the deadline of the running exec with KEY BY_MS later. EXEC_EXTENDED with
 * the milliseconds it now has in all (its timeout and every extension); EXEC_ENDED when the
 * daemon already decided to end it (timeout, kill, release); EXEC_UNKNOWN when no exec with
 * KEY runs (a background exec's record that ended: EXEC_ENDED). */
enum exec_extend_result exec_extend_by_key(struct workspace *ws, const char *key, uint64_t by_ms,
                                           uint64_t *total_ms)
{
    enum exec_extend_result result = EXEC_UNKNOWN;
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r && result == EXEC_UNKNOWN; r = r->next)
        if (r->key && strcmp(r->key, key) == 0) {
            if (kill_requested(r)) {
                result = EXEC_ENDED;
            } else {
                r->extended_ms += by_ms;
                *total_ms = r->timeout_ms + r->extended_ms;
                result = EXEC_EXTENDED;
            }
        }
    if (result == EXEC_UNKNOWN && background_key_taken_locked(ws, key))
        result = EXEC_ENDED;
    pthread_mutex_unlock(&ws->lock);
    return result;
}

/* An extend call's body: {"by_ms": N}, N from 1 to EXEC_EXTEND_MAX_MS; bad_request otherwise. */
bool exec_extend_parse(json_t *body, uint64_t *by_ms, struct api_error *err)
{
    *by_ms = 0;
    if (!body || !json_is_integer(json_object_get(body, "by_ms"))) {
        api_error_set(err, 400, "bad_request", "field \"by_ms\" must be a number of milliseconds");
        return false;
    }
    if (!json_get_uint(body, "by_ms", by_ms, err))
        return false;
    if (*by_ms < 1 || *by_ms > EXEC_EXTEND_MAX_MS) {
        api_error_set(err, 400, "bad_request", "field \"by_ms\" must be from 1 to %llu",
                      (unsigned long long)EXEC_EXTEND_MAX_MS);
        return false;
    }
    return true;
}

/* Release and drain: SIGKILLs the trees of every running exec of the workspace (only the
 * background ones: BACKGROUND_ONLY). */
void exec_kill_all(struct workspace *ws, bool background_only)
{
    pthread_mutex_lock(&ws->lock);
    for (struct exec_run *r = ws->execs; r; r = r->next)
        if (!background_only || r->bg)
            exec_kill_tree(r, KILL_RELEASE);
    pthread_mutex_unlock(&ws->lock);
}
