/*
 * sandbox.c - the per-workspace bubblewrap holder.
 *
 * A holder is `bwrap ... mesh-exec-agent` started as the sandbox user with user, mount, pid,
 * ipc, uts and net namespaces, a read-only base (host /usr and friends plus a curated /etc, or
 * --rootfs), a writable /workspace, a private /tmp, /proc and a minimal /dev. Its process is
 * the workspace's exec agent (agent.c), which keeps the namespaces alive and starts every
 * command of the workspace (exec.c); bwrap executes it through a descriptor of the daemon's, so
 * it needs no file inside the sandbox. The agent tells the daemon it is ready on a pipe, and
 * the daemon takes a copy of its request channel with pidfd_getfd. Holders are not children
 * that die with the daemon: a restarted daemon re-adopts them by pid and start time and takes
 * the channel again the same way.
 *
 * bwrap's own process carries a marker in its environment, HOLDER_MARKER=<workspace dir>, so a
 * restarted daemon finds every holder it or a predecessor started, also one whose start was
 * never recorded (the daemon killed between starting it and writing meta.json): the child
 * keeps the state-dir lock until its execve, so by the time a new daemon holds the lock every
 * holder being started has its marker. Holders no registered workspace explains are killed.
 */
#include "sandbox.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "json.h"
#include "layout.h"
#include "log.h"
#include "quota.h"
#include "reaper.h"
#include "registry.h"
#include "seccomp.h"
#include "tiers.h"
#include "util.h"
#include "agent_proto.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Host /etc entries copied into the curated base /etc: nothing secret (no shadow, gshadow,
 * ssh host keys, ssl/private, sudoers, machine-id, credentials). */
static const char *etc_allowlist[] = {
    "passwd", "group", "hosts", "host.conf", "nsswitch.conf", "gai.conf", "resolv.conf",
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "os-release",
    "debian_version", "alternatives", "profile", "profile.d", "bash.bashrc", "inputrc",
    "environment", "mime.types", "protocols", "services", "networks", "ethertypes",
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "magic",
    "magic.mime", "locale.alias", "python3", "python3.11", "perl", "shells", "terminfo",
    "manpath.config", "mke2fs.conf", "login.defs", "xattr.conf", NULL};

/* Top-level host entries that make up the read-only base besides /usr. */
static const char *base_dirs[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", NULL};

static char *curated_etc_dir;

/* The exec agent's binary (mesh-exec-agent beside the daemon's own), open for the lifetime
 * of the daemon: bwrap executes it as /proc/self/fd/AGENT_EXE_FD. */
static int agent_exe_fd = -1;

/* Holder child descriptors: bwrap's info pipe, the system-call filter, the agent's binary and
 * the pipe on which the agent reports that it is ready. */
enum { HOLDER_INFO_FD = 3, HOLDER_SECCOMP_FD, HOLDER_AGENT_EXE_FD, HOLDER_READY_FD };

/* Runs argv (a host tool such as cp) to completion; true when it exits 0. */
bool run_host_command(char *const argv[])
{
    pid_t pid = fork();
    int status = 0;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/* Builds <state>/base/etc once from the allowlist (kept across restarts because running
 * holders bind-mount it). */
static void build_curated_etc(void)
{
    char *base = xasprintf("%s/base", g_config.state_dir);
    curated_etc_dir = xasprintf("%s/etc", base);
    struct stat st;
    if (stat(curated_etc_dir, &st) == 0) {
        free(base);
        return;
    }
    char *staging = xasprintf("%s/etc.new", base);
    remove_tree(staging);
    mkdir_p(staging, 0755);
    chmod(base, 0711);
    for (int i = 0; etc_allowlist[i]; i++) {
        char *src = xasprintf("/etc/%s", etc_allowlist[i]);
        char *dst = xasprintf("%s/%s", staging, etc_allowlist[i]);
        char *dst_parent = strdup(dst);
        *strrchr(dst_parent, '/') = '\0';
        mkdir_p(dst_parent, 0755);
        if (lstat(src, &st) == 0) {
            char *argv[] = {"/bin/cp", "-a", src, dst, NULL};
            if (!run_host_command(argv))
                log_event("base: cannot copy %s", src);
        }
        free(src);
        free(dst);
        free(dst_parent);
    }
    chmod(staging, 0755);
    if (rename(staging, curated_etc_dir) != 0)
        log_event("base: cannot install %s: %s", curated_etc_dir, strerror(errno));
    free(staging);
    free(base);
}

/* True when the sandbox user can traverse to PATH (bubblewrap runs as that user and must
 * reach the workspace directories and the base). Checked in a child that switches user. */
static bool sandbox_user_reaches(const char *path)
{
    if (!g_config.is_root)
        return access(path, X_OK) == 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(1, &g_config.sandbox_gid) != 0 ||
            setresgid(g_config.sandbox_gid, g_config.sandbox_gid, g_config.sandbox_gid) != 0 ||
            setresuid(g_config.sandbox_uid, g_config.sandbox_uid, g_config.sandbox_uid) != 0)
            _exit(2);
        _exit(access(path, X_OK) == 0 ? 0 : 1);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/* Opens the exec agent's binary, mesh-exec-agent in the daemon's own directory; exits when
 * there is none (no workspace could run a command). */
static void open_agent_binary(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    char *path = slash ? xasprintf("%.*s/mesh-exec-agent", (int)(slash - self), self) : NULL;
    agent_exe_fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (agent_exe_fd < 0) {
        log_event("fatal: cannot open the exec agent %s: %s", path ? path : "mesh-exec-agent",
                  strerror(errno));
        exit(1);
    }
    free(path);
}

/* Prepares what every holder needs: the exec agent's binary and the curated /etc (unless
 * --rootfs); refuses to start when the sandbox user could not reach the state dir or the
 * rootfs. */
void sandbox_init(void)
{
    open_agent_binary();
    const char *paths[] = {g_config.state_dir, g_config.rootfs};
    for (int i = 0; i < 2; i++)
        if (paths[i] && !sandbox_user_reaches(paths[i])) {
            log_event("fatal: the sandbox user (uid %d) cannot traverse to %s; make every "
                      "directory above it searchable (o+x)", (int)g_config.sandbox_uid,
                      paths[i]);
            exit(1);
        }
    if (!g_config.rootfs)
        build_curated_etc();
}

/* Reads /proc/PID/NAME into BUF (NUL-terminated); its length, or -1 when it cannot be read. */
static ssize_t read_proc(pid_t pid, const char *name, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n > 0 ? n : -1;
}

/* Reads start time (field 22) and state (field 3) of PID from /proc/PID/stat; false when the
 * process does not exist. */
bool process_start_time(pid_t pid, unsigned long long *start, char *state)
{
    char buf[1024];
    if (read_proc(pid, "stat", buf, sizeof buf) < 0)
        return false;
    char *p = strrchr(buf, ')');   /* comm may contain spaces and parentheses */
    if (!p)
        return false;
    char st = ' ';
    unsigned long long value = 0;
    int field = 2;
    /* fields are single-space separated; no strtok: its state is shared by all threads */
    for (char *tok = p + 1; field < 22 && *tok == ' '; tok += strcspn(tok, " ")) {
        tok++;
        field++;
        if (field == 3)
            st = *tok;
        if (field == 22)
            value = strtoull(tok, NULL, 10);
    }
    if (state)
        *state = st;
    *start = value;
    return field == 22;
}

/* A bwrap command line under construction, with storage for the strings it builds. */
struct bwrap_cmd {
    char *argv[128];
    int argc;
    char storage[32][256];
    int stored;
};

/* Appends one argument (not copied: static strings or strings that outlive the spawn). */
static void cmd_push(struct bwrap_cmd *cmd, const char *arg)
{
    cmd->argv[cmd->argc++] = (char *)arg;
    cmd->argv[cmd->argc] = NULL;
}

/* Appends a NULL-terminated list of arguments. */
static void cmd_push_all(struct bwrap_cmd *cmd, const char *const *args)
{
    for (int i = 0; args[i]; i++)
        cmd_push(cmd, args[i]);
}

/* Appends a copy of ARG kept in the command's own storage. */
static void cmd_push_copy(struct bwrap_cmd *cmd, const char *arg)
{
    char *slot = cmd->storage[cmd->stored++];
    snprintf(slot, sizeof cmd->storage[0], "%s", arg);
    cmd_push(cmd, slot);
}

/* Appends FORMAT with one descriptor number filled in. */
static void cmd_push_fd(struct bwrap_cmd *cmd, const char *format, int fd)
{
    char text[32];
    snprintf(text, sizeof text, format, fd);
    cmd_push_copy(cmd, text);
}

/* Adds the read-only base: --rootfs, or host /usr, /bin, /lib* and the curated /etc. */
static void push_base_mounts(struct bwrap_cmd *cmd)
{
    if (g_config.rootfs) {
        cmd_push_all(cmd, (const char *[]){"--ro-bind", g_config.rootfs, "/", NULL});
        return;
    }
    cmd_push_all(cmd, (const char *[]){"--ro-bind", "/usr", "/usr", NULL});
    for (int i = 0; base_dirs[i]; i++) {
        char host[64], target[256];
        struct stat st;
        snprintf(host, sizeof host, "/%s", base_dirs[i]);
        if (lstat(host, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(host, target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            cmd_push(cmd, "--symlink");
            cmd_push_copy(cmd, target);
        } else {
            cmd_push(cmd, "--ro-bind");
            cmd_push_copy(cmd, host);
        }
        cmd_push_copy(cmd, host);
    }
    cmd_push_all(cmd, (const char *[]){"--ro-bind", curated_etc_dir, "/etc", NULL});
}

/*
 * The broker directory of one workspace, <broker-dir>/<id>, created for it: the credential
 * broker listens there for this workspace alone, so it knows which workspace is asking.
 */
static char *workspace_broker_dir(const char *id)
{
    char *dir = xasprintf("%s/%s", g_config.broker_dir, id);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        log_event("workspace %s: cannot create broker directory: %s", id, strerror(errno));
    chmod(dir, 0755);
    return dir;
}

/* The in-memory mounts, /tmp and /dev/shm, each sized to the tier's memory: their pages are
 * charged to the memory group of whoever writes them (the workspace's: the holder and every
 * exec join it before anything runs inside), so the tier's memory limit bounds them together
 * and a full /tmp ends as an OOM kill inside the workspace, never as host memory. Without an
 * explicit size the kernel would allow half of the host's RAM. */
static void push_tmpfs_mounts(struct bwrap_cmd *cmd, const struct size_tier *tier)
{
    char size[32];
    snprintf(size, sizeof size, "%llu", (unsigned long long)tier->memory_mb << 20);
    static const char *targets[] = {"/tmp", "/dev/shm"};
    for (int i = 0; i < 2; i++) {
        cmd_push(cmd, "--size");
        cmd_push_copy(cmd, size);
        cmd_push_all(cmd, (const char *[]){"--tmpfs", targets[i], NULL});
    }
}

/* The whole holder command line for workspace WS with directory FILES. */
static void build_holder_cmd(struct bwrap_cmd *cmd, struct workspace *ws, const char *files)
{
    const char *id = ws->id;
    cmd->argc = 0;
    cmd->stored = 0;
    cmd_push(cmd, g_config.bwrap_path);
    cmd_push_all(cmd, (const char *[]){"--unshare-user", "--unshare-pid", "--unshare-ipc",
                                       "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
                                       "--new-session", "--as-pid-1", "--cap-drop", "ALL",
                                       "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
                                       "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
                                       "--hostname", "workspace", NULL});
    push_base_mounts(cmd);
    /* the workspace's own broker directory, not a socket: a re-created socket shows up too */
    if (g_config.broker_dir) {
        char *dir = workspace_broker_dir(id);
        cmd_push(cmd, "--ro-bind");
        cmd_push_copy(cmd, dir);
        cmd_push(cmd, "/run/mesh");
        free(dir);
    }
    cmd_push_all(cmd, (const char *[]){"--proc", "/proc", "--dev", "/dev", NULL});
    push_tmpfs_mounts(cmd, ws->tier);
    cmd_push_all(cmd, (const char *[]){"--bind", files, "/workspace", "--chdir", "/workspace",
                                       "--info-fd", NULL});
    cmd_push_fd(cmd, "%d", HOLDER_INFO_FD);
    if (g_caps.seccomp) {
        cmd_push(cmd, "--seccomp");
        cmd_push_fd(cmd, "%d", HOLDER_SECCOMP_FD);
    }
    /* the agent keeps CAP_SYS_ADMIN alone (agent.c); bwrap sets no_new_privs */
    cmd_push(cmd, "--");
    cmd_push_fd(cmd, "/proc/self/fd/%d", HOLDER_AGENT_EXE_FD);
    cmd_push_fd(cmd, "%d", HOLDER_READY_FD);
}

#define HOLDER_MARKER "MESH_SANDBOXD_HOLDER"

/* What the holder's spawned child needs, all prepared before it starts. */
struct holder_spawn {
    struct workspace *ws;
    int info_write_fd;
    int ready_write_fd;
    char **argv;
    char **envp;
    char *log_path;
};

/* In the child: puts SOURCES[i] at descriptor HOLDER_INFO_FD + i (-1: left out), through
 * copies above them so that no source is overwritten before it is placed. */
CHILD_ENTRY static bool place_holder_fds(const int *sources, int count)
{
    int copies[8];
    for (int i = 0; i < count; i++)
        if (sources[i] >= 0 && (copies[i] = fcntl(sources[i], F_DUPFD, 16)) < 0)
            return false;
    for (int i = 0; i < count; i++)
        if (sources[i] >= 0 && dup2(copies[i], HOLDER_INFO_FD + i) != HOLDER_INFO_FD + i)
            return false;
    return true;
}

/* In the child (spawn_borrowing: system calls only): join the workspace cgroups, become the
 * sandbox user, exec bwrap with the info pipe, the system-call filter (when there is one), the
 * agent's binary and its ready pipe at the HOLDER_*_FD numbers, the marker as its only
 * environment and nothing else inherited (the other descriptors, the state-dir lock among
 * them, stay open until the execve). */
CHILD_ENTRY static int holder_child_exec(void *arg)
{
    struct holder_spawn *spawn = arg;
    struct workspace *ws = spawn->ws;
    sigset_t none;
    int null_fd = open("/dev/null", O_RDWR);
    int log_fd = open(spawn->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null_fd < 0 || log_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 ||
        dup2(log_fd, 2) < 0)
        _exit(125);
    for (int c = 0; c < CG_COUNT; c++)
        if (ws->cgroup_fds[c] >= 0 && write(ws->cgroup_fds[c], "0", 1) != 1)
            _exit(125);
    setsid();
    int filter = g_caps.seccomp ? seccomp_program_fd() : -1;
    int sources[] = {spawn->info_write_fd, filter, agent_exe_fd, spawn->ready_write_fd};
    if ((g_caps.seccomp && filter < 0) || !place_holder_fds(sources, 4))
        _exit(125);
    close_range(HOLDER_READY_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC);
    if (g_config.inherited_files.rlim_max)   /* known: give the sandbox its own limit back */
        setrlimit(RLIMIT_NOFILE, &g_config.inherited_files);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    /* raw system calls: glibc's wrappers would broadcast to the daemon's threads */
    if (g_config.is_root &&
        (syscall(SYS_setgroups, 1, &g_config.sandbox_gid) != 0 ||
         syscall(SYS_setresgid, g_config.sandbox_gid, g_config.sandbox_gid,
                 g_config.sandbox_gid) != 0 ||
         syscall(SYS_setresuid, g_config.sandbox_uid, g_config.sandbox_uid,
                 g_config.sandbox_uid) != 0))
        _exit(125);
    execve(g_config.bwrap_path, spawn->argv, spawn->envp);
    _exit(127);
}

/* Reads bwrap's --info-fd JSON (bounded wait) and returns the sandbox pid, or -1. */
static pid_t read_holder_pid(int info_read_fd)
{
    char buf[4096];
    size_t len = 0;
    double deadline = monotonic_ms() + 10000;
    while (len < sizeof buf - 1) {
        struct pollfd p = {.fd = info_read_fd, .events = POLLIN};
        int left = (int)(deadline - monotonic_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t n = read(info_read_fd, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        json_t *info = json_loads(buf, 0, NULL);
        if (info) {
            pid_t pid = (pid_t)json_integer_value(json_object_get(info, "child-pid"));
            json_decref(info);
            return pid > 0 ? pid : -1;
        }
    }
    return -1;
}

/* Waits (bounded) until the agent reports on READ_FD that it serves requests; false when its
 * pipe closes first (bwrap or the agent failed) or it takes over 10 s. */
static bool wait_agent_ready(int read_fd)
{
    char byte;
    struct pollfd p = {.fd = read_fd, .events = POLLIN};
    return poll(&p, 1, 10000) == 1 && read(read_fd, &byte, 1) == 1 && byte == 'R';
}

/* Takes a copy of the agent's request channel (agent_proto.h) into ws->agent_fd. The holder's
 * start time is checked after the pidfd is open, so a reused pid cannot hand over another
 * process's descriptor. */
static bool connect_agent(struct workspace *ws)
{
    unsigned long long start;
    int pidfd = (int)syscall(SYS_pidfd_open, ws->holder_pid, 0);
    if (pidfd < 0)
        return false;
    if (process_start_time(ws->holder_pid, &start, NULL) && start == ws->holder_start)
        ws->agent_fd = (int)syscall(SYS_pidfd_getfd, pidfd, AGENT_CONTROL_FD, 0);
    else
        errno = ESRCH;
    int error = errno;
    close(pidfd);
    struct timeval send_timeout = {.tv_sec = 10};   /* the agent takes requests at once */
    if (ws->agent_fd >= 0)
        setsockopt(ws->agent_fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    errno = error;
    return ws->agent_fd >= 0;
}

/* Inode of a namespace descriptor, to compare namespaces. */
static ino_t ns_inode(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* bwrap may nest a second user namespace (it does with --dev: it is uid 0 in the first one
 * to mount devpts, then drops into a second one). The network namespace belongs to the outer
 * one, so the egress listener joins that (a non-root daemon needs it to enter the network
 * namespace). Replaces user_ns_fd, the holder's own, by the outermost sandbox user namespace
 * (a child of ours). */
static bool find_outer_user_ns(struct workspace *ws)
{
    int self = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
    ino_t own = self >= 0 ? ns_inode(self) : 0;
    int current = dup(ws->user_ns_fd);
    if (self >= 0)
        close(self);
    for (int depth = 0; current >= 0 && depth < 8; depth++) {
        int parent = ioctl(current, NS_GET_PARENT);
        if (parent < 0 || ns_inode(parent) == own) {
            if (parent >= 0)
                close(parent);
            break;
        }
        close(current);
        current = parent;
    }
    if (current < 0)
        return false;
    fcntl(current, F_SETFD, FD_CLOEXEC);
    close(ws->user_ns_fd);
    ws->user_ns_fd = current;
    return true;
}

/* Opens what the daemon keeps of the holder: the user and network namespaces (the egress
 * listener joins them) and its root (file calls resolve in it). */
static bool open_holder_fds(struct workspace *ws)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)ws->holder_pid);
    ws->user_ns_fd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)ws->holder_pid);
    ws->net_ns_fd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/root", (int)ws->holder_pid);
    ws->root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return ws->user_ns_fd >= 0 && ws->net_ns_fd >= 0 && ws->root_fd >= 0 &&
           find_outer_user_ns(ws);
}

/* Closes the holder's namespace, root and agent descriptors (workspace stopped or freed). */
void sandbox_close_fds(struct workspace *ws)
{
    egress_stop(ws);   /* its listener lives in the namespace these fds name */
    close_fd(&ws->user_ns_fd);
    close_fd(&ws->net_ns_fd);
    close_fd(&ws->root_fd);
    close_fd(&ws->agent_fd);
}

/* Keeps the OOM killer off the holder so a memory hog cannot take the workspace down. */
static void protect_holder_from_oom(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    static bool warned;   /* request threads race here: exchanged atomically */
    if (fd >= 0) {
        if (write(fd, "-1000", 5) != 5 && !__atomic_exchange_n(&warned, true, __ATOMIC_SEQ_CST)) {
            /* needs CAP_SYS_RESOURCE, which some hosts withhold */
            log_event("holders keep their default oom_score_adj: %s", strerror(errno));
        }
        close(fd);
    }
}

/* Logs the first line bwrap wrote to <ws>/holder.log when a holder failed to start. */
static void log_holder_failure(struct workspace *ws, const char *step, int error, int status)
{
    char *dir = workspace_dir(ws->id);
    char *path = xasprintf("%s/holder.log", dir);
    char line[512] = "";
    FILE *f = fopen(path, "re");
    if (f && fgets(line, sizeof line, f))
        line[strcspn(line, "\n")] = '\0';
    if (f)
        fclose(f);
    log_event("workspace %s: holder failed to start (%s: %s; bwrap %s %d): %s", ws->id, step,
              strerror(error), WIFSIGNALED(status) ? "signal" : "exit",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), line);
    free(path);
    free(dir);
}

/* Starts the workspace's holder, waits for its agent and opens its namespaces; spawn_failed on
 * error with no process left behind. */
bool sandbox_start(struct workspace *ws, struct api_error *err)
{
    char *files = workspace_files_dir(ws->id);
    char *dir = workspace_dir(ws->id);
    struct holder_spawn spawn = {.ws = ws, .log_path = xasprintf("%s/holder.log", dir)};
    struct bwrap_cmd *cmd = calloc(1, sizeof *cmd);
    int info[2] = {-1, -1}, ready[2] = {-1, -1};
    char *marker = xasprintf("%s=%s", HOLDER_MARKER, dir);
    char *envp[] = {marker, NULL};
    bool ok = cmd && pipe2(info, O_CLOEXEC) == 0 && pipe2(ready, O_CLOEXEC) == 0;
    pid_t child = -1;
    if (ok) {
        build_holder_cmd(cmd, ws, files);
        spawn.info_write_fd = info[1];
        spawn.ready_write_fd = ready[1];
        spawn.argv = cmd->argv;
        spawn.envp = envp;
        child = spawn_borrowing(holder_child_exec, &spawn);
        close(info[1]);
        close(ready[1]);
        info[1] = ready[1] = -1;
        if (child > 0)   /* meanwhile, bwrap builds the sandbox */
            cgroup_exec_slot_prepare(ws->id, 0);
        ws->holder_pid = child > 0 ? read_holder_pid(info[0]) : -1;
        ws->bwrap_pid = child;
    }
    const char *step = "pipe";   /* the step that failed, for the log */
    ok = ok && (step = "spawn", child > 0) && (step = "bwrap's info", ws->holder_pid > 0) &&
         (step = "holder start time",
          process_start_time(ws->holder_pid, &ws->holder_start, NULL)) &&
         (step = "agent ready", wait_agent_ready(ready[0])) &&
         (step = "agent channel", connect_agent(ws)) &&
         (step = "namespaces", open_holder_fds(ws)) &&
         (step = "inotify bound", quota_inotify_bound(ws)) && (step = "egress", egress_start(ws));
    int error = errno;   /* what the failing step left, before the cleanup's calls */
    for (int i = 0; i < 2; i++) {
        if (info[i] >= 0)
            close(info[i]);
        if (ready[i] >= 0)
            close(ready[i]);
    }
    if (!ok) {
        int status = 0;      /* bwrap's, or 125 when its set-up in the child failed */
        if (ws->holder_pid > 0)
            kill(ws->holder_pid, SIGKILL);
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
        }
        log_holder_failure(ws, step, error, status);
        sandbox_close_fds(ws);
        ws->holder_pid = 0;
        if (errno_is_exhaustion(error))
            api_error_from_errno(err, error, "cannot start the sandbox");
        else
            api_error_set(err, 500, "spawn_failed", "the sandbox could not be started");
    } else {
        reaper_watch(child);   /* bwrap exits with the sandbox, maybe after this thread */
        if (g_config.is_root)
            protect_holder_from_oom(ws->holder_pid);
        log_event("workspace %s: holder pid %d started", ws->id, (int)ws->holder_pid);
    }
    free(marker);
    free(files);
    free(dir);
    free(spawn.log_path);
    free(cmd);
    return ok;
}

/* Re-adopts a holder recorded by a previous daemon run if it is still the same process. */
bool sandbox_adopt(struct workspace *ws)
{
    unsigned long long start;
    char state;
    if (ws->holder_pid <= 0 || !process_start_time(ws->holder_pid, &start, &state) ||
        start != ws->holder_start || state == 'Z')
        return false;
    if (!connect_agent(ws) || !open_holder_fds(ws) || !egress_start(ws)) {
        sandbox_close_fds(ws);
        return false;
    }
    log_event("workspace %s: re-adopted holder pid %d", ws->id, (int)ws->holder_pid);
    return true;
}

/* True while the workspace's holder is the live process we started or adopted. */
bool holder_running(struct workspace *ws)
{
    unsigned long long start;
    char state;
    return ws->holder_pid > 0 && process_start_time(ws->holder_pid, &start, &state) &&
           start == ws->holder_start && state != 'Z';
}

/* After the agent's channel closed: waits (bounded by MS) for the holder to finish dying,
 * which takes as long as the kernel needs to end every process of its pid namespace; true
 * when it is gone. */
bool holder_ends_within(struct workspace *ws, int ms)
{
    int pidfd = ws->holder_pid > 0 ? (int)syscall(SYS_pidfd_open, ws->holder_pid, 0) : -1;
    if (pidfd < 0 || !holder_running(ws)) {   /* after the open: no pid reuse in between */
        if (pidfd >= 0)
            close(pidfd);
        return !holder_running(ws);
    }
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    bool gone = poll(&p, 1, ms) == 1;
    close(pidfd);
    return gone || !holder_running(ws);
}

/* Kills the holder (SIGKILL: bwrap's pid 1 ignores SIGTERM), which tears down its pid
 * namespace and every process in it, and waits until it is gone. */
void sandbox_stop(struct workspace *ws)
{
    unsigned long long start;
    char state;
    sandbox_close_fds(ws);
    if (ws->holder_pid <= 0)
        return;
    if (process_start_time(ws->holder_pid, &start, &state) && start == ws->holder_start)
        kill(ws->holder_pid, SIGKILL);
    for (int i = 0; i < 5000; i++) {
        if (!process_start_time(ws->holder_pid, &start, &state) || start != ws->holder_start)
            break;
        if (state == 'Z')
            waitpid(ws->holder_pid, NULL, WNOHANG);
        usleep(1000);
    }
    for (int i = 0; ws->bwrap_pid > 0 && i < 2000; i++) {   /* exits with its sandbox */
        pid_t r = waitpid(ws->bwrap_pid, NULL, WNOHANG);
        if (r != 0)
            break;   /* reaped, or ECHILD: the main thread reaped it */
        usleep(1000);
    }
    ws->bwrap_pid = 0;
    ws->holder_pid = 0;
}

/* The workspace id (or standby name, standby.c) in PID's holder marker when it names one of
 * this state dir; false for every other process (and for those we may not read). */
static bool holder_marker_of(pid_t pid, char *id, size_t size)
{
    char buf[8192];
    ssize_t n = read_proc(pid, "environ", buf, sizeof buf);
    if (n < 0)
        return false;
    char *prefix = xasprintf("%s=%s/workspaces/", HOLDER_MARKER, g_config.state_dir);
    size_t plen = strlen(prefix);
    bool found = false;
    for (char *entry = buf; entry < buf + n && !found; entry += strlen(entry) + 1)
        if (strncmp(entry, prefix, plen) == 0 &&
            (workspace_id_valid(entry + plen) || standby_name(entry + plen))) {
            snprintf(id, size, "%s", entry + plen);
            found = true;
        }
    free(prefix);
    return found;
}

/* The first child of PID (bwrap's sandbox process), or 0. */
static pid_t first_child(pid_t pid)
{
    char name[64], buf[64];
    snprintf(name, sizeof name, "task/%d/children", (int)pid);
    return read_proc(pid, name, buf, sizeof buf) < 0 ? 0 : (pid_t)atoi(buf);
}

/* The parent of PID from /proc/PID/stat, or 0. */
static pid_t parent_of(pid_t pid)
{
    char buf[1024];
    int ppid = 0;
    char *p = read_proc(pid, "stat", buf, sizeof buf) < 0 ? NULL : strrchr(buf, ')');
    return p && sscanf(p + 1, " %*c %d", &ppid) == 1 ? (pid_t)ppid : 0;
}

/*
 * Start-up, after the workspaces are loaded: every process carrying this state dir's holder
 * marker is either the bwrap of a registered running workspace's holder (adopted, already
 * logged) or a stray -- started by a daemon that died before recording it, or replaced since
 * -- which is killed with its sandbox and logged, so nothing runs that no workspace lists.
 * A standby's marker keeps its pool name after adoption: REGISTERED knows it by its pid.
 */
void sandbox_kill_strays(bool (*registered)(const char *id, pid_t holder_pid))
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    char id[WORKSPACE_ID_MAX + 1];
    while (d && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid() || !holder_marker_of(pid, id, sizeof id))
            continue;
        pid_t sandbox = first_child(pid);
        if (sandbox > 0 && parent_of(sandbox) == pid && registered(id, sandbox))
            continue;
        if (sandbox > 0)
            kill(sandbox, SIGKILL);   /* ends its pid namespace */
        kill(-pid, SIGKILL);          /* bwrap's session: a sandbox process not yet split off */
        kill(pid, SIGKILL);
        log_event("workspace %s: killed stray holder (bwrap pid %d, sandbox pid %d) that no "
                  "workspace lists", id, (int)pid, (int)sandbox);
    }
    if (d)
        closedir(d);
}
