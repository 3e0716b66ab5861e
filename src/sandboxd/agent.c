/*
 * agent.c - mesh-exec-agent, the resident exec agent of one workspace sandbox.
 *
 * bubblewrap starts it as the sandbox's pid 1 (the holder), inside every namespace of the
 * workspace, in its cgroups, under the system-call filter and no_new_privs. It keeps one
 * capability, CAP_SYS_ADMIN in the workspace's own user namespace, to give each command a pid
 * namespace of its own; its bounding, inheritable and ambient sets are empty, so nothing it
 * starts can regain anything. It is not dumpable. Its descriptors and protocol: agent_proto.h.
 *
 * Process chain of one exec (agent_proto.h has the messages; the exec's socket ending or
 * carrying anything but a forwarded signal's number SIGKILLs its init; a forwarded signal goes
 * to init, which sends it to every process of its namespace):
 *
 *   agent --clone(VM|NEWPID|PIDFD)--> init: pid 1 of a fresh pid namespace; joins the exec's
 *     cpuacct group, wires stdio, enters the working directory, drops the last capability
 *   init --clone(VM|VFORK)--> command: joins the exec's memory group, execs argv (pid 2);
 *     init reaps until it exits, then exits, and the kernel kills whatever is left in the
 *     namespace (double-forked daemons included).
 *
 * init and the command (until its execve) share the agent's memory, so creating them copies
 * no page tables; they make system calls only and write their results into their own
 * agent_exec. As a vfork child the command is never the OOM killer's choice before its
 * execve; from then on its memory is its own and charged to the exec's group. The agent is
 * built static (it runs on any --rootfs) and bubblewrap executes it through a descriptor, so
 * no file of it exists inside the sandbox.
 *
 * usage (by the daemon, through bwrap): mesh-exec-agent READY_FD
 */
#define _GNU_SOURCE
#include "agent_proto.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define STACK_BYTES (64 * 1024)

/* One running exec: what the daemon sent, and what init and the command write back. */
struct agent_exec {
    int fds[AGENT_MAX_FDS];          /* as received; -1 when absent */
    int nfds;
    int payload_fd, cpu_fd, memory_fd;  /* among fds, -1 when absent */
    char *payload;
    struct agent_payload p;
    const char *path_env;
    char *stacks;                    /* init's and the command's */
    pid_t init;
    int init_pidfd;
    bool killed;                     /* SIGKILL sent: the exec's socket is no longer watched */
    /* written by init and the command (shared memory) */
    int command_done;
    int command_status;
    int spawn_errno;
    int spawn_in_dir;
};

static struct agent_exec **running;
static size_t running_count, running_cap;

/* Stacks of finished execs, kept for the next ones (no mapping and no page faults per exec). */
#define SPARE_STACKS 8
static char *spare_stacks[SPARE_STACKS];
static int spare_count;

/* Writes "mesh-exec-agent: MESSAGE" to stderr (the holder's log). */
static void agent_log(const char *message)
{
    char line[512];
    int n = snprintf(line, sizeof line, "mesh-exec-agent: %s: %s\n", message, strerror(errno));
    if (n > 0 && write(2, line, (size_t)n) < 0)
        return;
}

/* Writes "mesh: WHAT: REASON" to the command's stderr (inside init or the command). */
static void init_report(const char *what, int error)
{
    char line[1024];
    const char *reason = error == ENOENT ? "command not found" : strerrordesc_np(error);
    int n = snprintf(line, sizeof line, "mesh: %s: %s\n", what, reason ? reason : "error");
    if (n > 0 && write(2, line, (size_t)n) < 0)
        return;
}

/* Keeps CAP_SYS_ADMIN (effective and permitted) and nothing else anywhere: empty bounding,
 * inheritable and ambient sets. bubblewrap gave the agent CAP_SETPCAP for the bounding set. */
static bool keep_only_sys_admin(void)
{
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            return false;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        return false;
    memset(data, 0, sizeof data);
    data[0].effective = data[0].permitted = 1u << CAP_SYS_ADMIN;
    return syscall(SYS_capset, &header, data) == 0;
}

/* Drops the last capability (inside init, before anything of the command runs). */
static bool drop_all_capabilities(void)
{
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(SYS_capset, &header, data) == 0;
}

/* execve with a PATH search (argv[0] without '/'); returns only on failure, with errno of the
 * most telling attempt: a failure that is not about the file's absence (E2BIG, ENOEXEC, ...)
 * ends the search at once and is what the caller reports; EACCES beats ENOENT. */
static void exec_with_path(struct agent_exec *ex)
{
    const char *file = ex->p.argv[0];
    char candidate[4096];
    int best_errno = ENOENT;
    if (strchr(file, '/')) {
        execve(file, ex->p.argv, ex->p.envp);
        return;
    }
    for (const char *dir = ex->path_env; dir && *dir;) {
        const char *end = strchrnul(dir, ':');
        size_t dir_len = (size_t)(end - dir);
        if (dir_len + strlen(file) + 2 <= sizeof candidate) {
            memcpy(candidate, dir, dir_len);
            candidate[dir_len] = '/';
            strcpy(candidate + dir_len + 1, file);
            execve(candidate, ex->p.argv, ex->p.envp);
            if (errno == EACCES)
                best_errno = EACCES;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE)
                return;
        }
        dir = *end ? end + 1 : end;
    }
    errno = best_errno;
}

/* init's handler of a forwarded signal (agent_signal_forwarded): as pid 1 of the exec's
 * namespace it passes the signal on to every other process there, children and double-forked
 * ones alike. */
static void forward_to_namespace(int sig)
{
    int saved = errno;
    kill(-1, sig);
    errno = saved;
}

/* In init, before the command starts: handles the forwarded signals (pid 1 of a namespace
 * receives from its parent only the signals it handles) and blocks them until the command runs,
 * so the command inherits no window where one is lost. */
static void forwarding_begin(void)
{
    struct sigaction sa = {.sa_handler = forward_to_namespace};
    sigset_t forwarded;
    sigemptyset(&forwarded);
    for (int sig = 1; sig < 32; sig++)
        if (agent_signal_forwarded(sig)) {
            sigaddset(&forwarded, sig);
            sigaction(sig, &sa, NULL);
        }
    sigprocmask(SIG_SETMASK, &forwarded, NULL);
}

/* In the command before its execve (DEFAULTS: it gets the default dispositions back), and in
 * init once the command runs: unblocks every signal. */
static void forwarding_end(bool defaults)
{
    sigset_t none;
    sigemptyset(&none);
    if (defaults)
        for (int sig = 1; sig < 32; sig++)
            if (agent_signal_forwarded(sig))
                signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The command: joins the exec's memory group (inherited as fd 3) and execs, or reports 127. */
static int command_stage(void *arg)
{
    struct agent_exec *ex = arg;
    forwarding_end(true);
    if (ex->memory_fd >= 0 && (write(3, "0", 1) != 1 || close(3) != 0)) {
        init_report("cannot join the workspace memory group", errno);
        _exit(127);
    }
    exec_with_path(ex);
    ex->spawn_errno = errno;
    init_report(ex->p.argv[0], errno);
    _exit(127);
}

/* pid 1 of the exec's pid namespace: cpuacct group, stdio, directory and the last
 * capability, then the command as pid 2 (so it keeps normal signal semantics, which pid 1
 * lacks). Reaps orphans until the command exits, records its status and exits. */
static int init_stage(void *arg)
{
    struct agent_exec *ex = arg;
    int status;
    if (ex->cpu_fd >= 0 && write(ex->cpu_fd, "0", 1) != 1)
        _exit(127);
    if (dup2(ex->fds[AGENT_FD_STDIN], 0) < 0 || dup2(ex->fds[AGENT_FD_STDOUT], 1) < 0 ||
        dup2(ex->fds[AGENT_FD_STDERR], 2) < 0)
        _exit(127);
    if (ex->memory_fd >= 0 && dup2(ex->memory_fd, 3) != 3)
        _exit(127);
    close_range(ex->memory_fd >= 0 ? 4 : 3, ~0U, 0);
    forwarding_begin();
    setsid();
    if (chdir("/workspace") != 0 || chdir(ex->p.dir) != 0) {
        ex->spawn_errno = errno;
        ex->spawn_in_dir = 1;
        init_report(ex->p.dir, errno);
        _exit(127);
    }
    if (!drop_all_capabilities()) {
        init_report("cannot drop privileges", errno);
        _exit(127);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    pid_t command = clone(command_stage, ex->stacks + 2 * STACK_BYTES,
                          CLONE_VM | CLONE_VFORK | SIGCHLD, ex);
    if (command < 0) {
        init_report(ex->p.argv[0], errno);
        _exit(127);
    }
    forwarding_end(false);
    close(0);
    for (;;) {
        pid_t pid = waitpid(-1, &status, __WALL);
        if (pid == command) {
            ex->command_status = status;
            __atomic_store_n(&ex->command_done, 1, __ATOMIC_SEQ_CST);
            _exit(0);
        }
        if (pid < 0 && errno != EINTR)
            _exit(127);
    }
}

/* Sends REPLY on the exec's socket. The daemon may have gone (its end closed): no SIGPIPE. */
static void send_reply(struct agent_exec *ex, struct agent_reply *reply)
{
    reply->magic = AGENT_MAGIC;
    reply->version = AGENT_PROTOCOL;
    while (send(ex->fds[AGENT_FD_REPLY], reply, sizeof *reply, MSG_NOSIGNAL) < 0 &&
           errno == EINTR)
        ;
}

/* Closes everything the exec holds and frees it. */
static void exec_free(struct agent_exec *ex)
{
    for (int i = 0; i < ex->nfds; i++)
        if (ex->fds[i] >= 0)
            close(ex->fds[i]);
    if (ex->init_pidfd >= 0)
        close(ex->init_pidfd);
    if (ex->stacks && spare_count < SPARE_STACKS)
        spare_stacks[spare_count++] = ex->stacks;
    else if (ex->stacks)
        munmap(ex->stacks, 2 * STACK_BYTES);
    free(ex->p.argv);
    free(ex->p.envp);
    free(ex->payload);
    free(ex);
}

/* Answers AGENT_FAILED for STEP and frees the exec. */
static void exec_fail(struct agent_exec *ex, enum agent_step step, int error)
{
    struct agent_reply reply = {.kind = AGENT_FAILED, .failed_step = step, .failed_errno = error};
    if (ex->nfds > AGENT_FD_REPLY)
        send_reply(ex, &reply);
    exec_free(ex);
}

/* The payload: copied from the request message (INLINE, LEN bytes) or read whole from its
 * memfd (pread: the daemon wrote it from offset 0). */
static bool read_payload(struct agent_exec *ex, const char *inline_bytes, size_t len)
{
    size_t done = 0;
    ex->payload = malloc(len ? len : 1);
    if (ex->payload && inline_bytes) {
        memcpy(ex->payload, inline_bytes, len);
        return true;
    }
    while (ex->payload && done < len) {
        ssize_t n = pread(ex->payload_fd, ex->payload + done, len - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return ex->payload != NULL;
}

/* Receives one request with its descriptors (and its payload into INLINE_BYTES when it came
 * inline); NULL when the message was not one (its descriptors are closed, and answered
 * AGENT_FAILED when a reply socket came with it). */
static struct agent_exec *receive_request(struct agent_request *req, char *inline_bytes)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(AGENT_MAX_FDS * sizeof(int))];
    } control;
    struct iovec iov[2] = {{.iov_base = req, .iov_len = sizeof *req},
                           {.iov_base = inline_bytes, .iov_len = AGENT_INLINE_MAX}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    ssize_t n = recvmsg(AGENT_RECEIVE_FD, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return NULL;
    struct agent_exec *ex = calloc(1, sizeof *ex);
    if (!ex) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                    close(((int *)CMSG_DATA(c))[i]);
        return NULL;
    }
    ex->init_pidfd = ex->payload_fd = ex->cpu_fd = ex->memory_fd = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                if (ex->nfds < AGENT_MAX_FDS)
                    ex->fds[ex->nfds++] = fd;
                else
                    close(fd);
            }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        !agent_request_valid(req, (size_t)n, ex->nfds)) {
        exec_fail(ex, AGENT_STEP_REQUEST, EINVAL);
        return NULL;
    }
    int next = AGENT_FIXED_FDS;
    if (!(req->flags & AGENT_INLINE))
        ex->payload_fd = ex->fds[next++];
    if (req->flags & AGENT_CPU_GROUP)
        ex->cpu_fd = ex->fds[next++];
    if (req->flags & AGENT_MEMORY_GROUP)
        ex->memory_fd = ex->fds[next++];
    return ex;
}

/* Adds EX to the running execs. */
static bool track(struct agent_exec *ex)
{
    if (running_count == running_cap) {
        size_t cap = running_cap ? 2 * running_cap : 16;
        struct agent_exec **grown = realloc(running, cap * sizeof *grown);
        if (!grown)
            return false;
        running = grown;
        running_cap = cap;
    }
    running[running_count++] = ex;
    return true;
}

/* One request: payload, stacks, init (or AGENT_FAILED). */
static void start_exec(void)
{
    static char inline_bytes[AGENT_INLINE_MAX];
    struct agent_request req;
    struct agent_exec *ex = receive_request(&req, inline_bytes);
    if (!ex)
        return;
    if (!read_payload(ex, req.flags & AGENT_INLINE ? inline_bytes : NULL,
                      (size_t)req.payload_len) ||
        !agent_payload_parse(ex->payload, (size_t)req.payload_len, req.argc, req.envc, &ex->p)) {
        exec_fail(ex, AGENT_STEP_PAYLOAD, EINVAL);
        return;
    }
    for (char **e = ex->p.envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            ex->path_env = *e + 5;
    ex->stacks = spare_count > 0 ? spare_stacks[--spare_count]
                 : mmap(NULL, 2 * STACK_BYTES, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (ex->stacks == MAP_FAILED || !track(ex)) {
        int error = ex->stacks == MAP_FAILED ? errno : ENOMEM;
        if (ex->stacks == MAP_FAILED)
            ex->stacks = NULL;
        exec_fail(ex, AGENT_STEP_MEMORY, error);
        return;
    }
    ex->init = clone(init_stage, ex->stacks + STACK_BYTES,
                     CLONE_VM | CLONE_NEWPID | CLONE_PIDFD | SIGCHLD, ex, &ex->init_pidfd);
    if (ex->init < 0) {
        running_count--;
        exec_fail(ex, AGENT_STEP_CLONE, errno);
        return;
    }
}

/* The daemon wrote to the exec's socket or closed it: a forwarded signal's number goes to its
 * init (which sends it on to the whole namespace); anything else, or the socket's end,
 * SIGKILLs the init, which ends the tree (the kernel kills every process of the exec's pid
 * namespace with it). */
static void exec_socket_readable(struct agent_exec *ex)
{
    unsigned char byte;
    ssize_t n;
    while ((n = recv(ex->fds[AGENT_FD_REPLY], &byte, 1, MSG_DONTWAIT)) > 0 &&
           agent_signal_forwarded(byte))
        syscall(SYS_pidfd_send_signal, ex->init_pidfd, (int)byte, NULL, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    while (recv(ex->fds[AGENT_FD_REPLY], &byte, 1, MSG_DONTWAIT) > 0)
        ;
    syscall(SYS_pidfd_send_signal, ex->init_pidfd, SIGKILL, NULL, 0);
    ex->killed = true;
}

/* Reaps the exec at index I (its init exited) and answers AGENT_DONE. */
static void finish_exec(size_t i)
{
    struct agent_exec *ex = running[i];
    struct rusage usage;
    int status;
    if (wait4(ex->init, &status, __WALL | WNOHANG, &usage) <= 0)
        return;
    struct agent_reply reply = {
        .kind = AGENT_DONE, .init_status = status,
        .command_done = (uint8_t)__atomic_load_n(&ex->command_done, __ATOMIC_SEQ_CST),
        .command_status = ex->command_status, .spawn_errno = ex->spawn_errno,
        .spawn_in_dir = (uint8_t)ex->spawn_in_dir,
        .cpu_us = (int64_t)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec +
                  (int64_t)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec};
    send_reply(ex, &reply);
    running[i] = running[--running_count];
    exec_free(ex);
}

/* Serves requests, kills and reaps inits until killed (the holder's end is its SIGKILL). Each
 * running exec has two entries in the poll set: its init's pidfd and its socket (dropped from
 * the set once the exec is killed, as a closed socket stays readable). */
static void serve(void)
{
    struct pollfd *fds = NULL;
    size_t fds_cap = 0;
    for (;;) {
        size_t need = 2 * running_count + 1;
        if (fds_cap < need) {
            struct pollfd *grown = realloc(fds, 2 * need * sizeof *grown);
            if (!grown) {
                agent_log("out of memory");
                sleep(1);
                continue;
            }
            fds = grown;
            fds_cap = 2 * need;
        }
        size_t n = running_count;
        fds[0] = (struct pollfd){.fd = AGENT_RECEIVE_FD, .events = POLLIN};
        for (size_t i = 0; i < n; i++) {
            fds[2 * i + 1] = (struct pollfd){.fd = running[i]->init_pidfd, .events = POLLIN};
            fds[2 * i + 2] = (struct pollfd){
                .fd = running[i]->killed ? -1 : running[i]->fds[AGENT_FD_REPLY], .events = POLLIN};
        }
        if (poll(fds, 2 * n + 1, -1) < 0)
            continue;
        for (size_t i = n; i > 0; i--) {   /* backwards: finishing moves the last one into i-1 */
            if (fds[2 * i].revents && !running[i - 1]->killed)
                exec_socket_readable(running[i - 1]);
            if (fds[2 * i - 1].revents)
                finish_exec(i - 1);
        }
        if (fds[0].revents & POLLIN)
            start_exec();
    }
}

/* Closes every descriptor from 3 up except READY and the channel's two. */
static void close_inherited(int ready)
{
    int keep[3] = {ready, AGENT_RECEIVE_FD, AGENT_CONTROL_FD};
    for (int i = 0; i < 3; i++)   /* sort the three */
        for (int j = i + 1; j < 3; j++)
            if (keep[j] < keep[i]) {
                int t = keep[i];
                keep[i] = keep[j];
                keep[j] = t;
            }
    unsigned from = 3;
    for (int i = 0; i < 3; i++) {
        if ((unsigned)keep[i] > from)
            close_range(from, (unsigned)keep[i] - 1, 0);
        if ((unsigned)keep[i] + 1 > from)
            from = (unsigned)keep[i] + 1;
    }
    close_range(from, ~0U, 0);
}

int main(int argc, char **argv)
{
    int ready = argc == 2 ? atoi(argv[1]) : -1;
    int pair[2];
    if (ready < 3 || ready == AGENT_RECEIVE_FD || ready == AGENT_CONTROL_FD) {
        errno = EINVAL;
        agent_log("usage: mesh-exec-agent READY_FD");
        return 2;
    }
    prctl(PR_SET_NAME, "mesh-exec-agent", 0, 0, 0);   /* its name in ps, not "5" */
    umask(022);   /* the commands' own, whatever the daemon's was when it forked the holder */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || !keep_only_sys_admin()) {
        agent_log("cannot set up privileges");
        return 1;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0 ||
        dup3(pair[0], AGENT_RECEIVE_FD, O_CLOEXEC) != AGENT_RECEIVE_FD ||
        dup3(pair[1], AGENT_CONTROL_FD, O_CLOEXEC) != AGENT_CONTROL_FD) {
        agent_log("cannot create the request channel");
        return 1;
    }
    close_inherited(ready);
    if (write(ready, "R", 1) != 1) {
        agent_log("cannot report ready");
        return 1;
    }
    close(ready);
    serve();
    return 0;
}
