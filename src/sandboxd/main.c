/*
 * main.c - mesh-sandboxd entry point: flags, single-instance lock on the state dir, child
 * subreaper, signal handling (SIGTERM drains and exits; workspaces stay alive for the next
 * start, or are hibernated with --hibernate-on-exit; background commands end) and the reaper
 * loop, which sleeps until a signal arrives or a watched child exits, and once a minute forgets
 * background records that expired.
 */
#include "capabilities.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "hostsetup.h"
#include "http.h"
#include "log.h"
#include "reaper.h"
#include "sandbox.h"
#include "single.h"
#include "snapshot.h"
#include "standby.h"
#include "util.h"
#include "workspace.h"
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Prints usage and exits with STATUS. */
static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: mesh-sandboxd --state-dir DIR (--listen ADDR:PORT --token-file FILE | "
            "--socket PATH) [options]\n"
            "  --listen ADDR:PORT      TCP listener; requests need the bearer token\n"
            "  --token-file FILE       bearer token (first line)\n"
            "  --socket PATH           unix socket listener, mode 0600\n"
            "  --state-dir DIR         workspaces, state and lock (required)\n"
            "  --rootfs DIR            read-only base instead of host /usr + curated /etc\n"
            "  --broker-dir DIR        directory of the credential broker's socket, shown\n"
            "                          read-only at /run/mesh inside every sandbox\n"
            "  --sandbox-user USER     uid running sandboxes (root default: nobody)\n"
            "  --release MODE          destroy (default) or hibernate\n"
            "  --max-body-bytes N      request body limit (default 67108864)\n"
            "  --max-file-bytes N      file read/write limit (default 67108864)\n"
            "  --max-output-bytes N    per-stream exec output clamp (default 1048576)\n"
            "  --max-kept-output-bytes N  per-stream bytes kept for output \"tail\" (default 268435456)\n"
            "  --background-buffer-bytes N  per stream of a background exec, bytes held for its\n"
            "                          client before the command blocks on write (default 4194304)\n"
            "  --background-buffer-total N  all background execs' buffers together: past it a\n"
            "                          stream holds a pipe's capacity (64 KiB) at most\n"
            "                          (default 67108864)\n"
            "  --max-background-execs N  per workspace, background execs running or ended and\n"
            "                          not forgotten (default 64; more are 429)\n"
            "  --background-ttl SECONDS  an ended background exec's record is forgotten this\n"
            "                          long after its end, fetched or not (default 600)\n"
            "  --standby N             holders kept started for new workspaces of the default\n"
            "                          tier (default 1, 0 = none, at most 64)\n"
            "  --bwrap PATH            bubblewrap binary (default /usr/bin/bwrap)\n"
            "  --cgroup-name NAME      cgroup subtree name (default mesh-sandboxd)\n"
            "  --hibernate-on-exit     on SIGTERM kill commands in flight and stop all\n"
            "                          workspaces (files kept)\n"
            "  --ready-fd N            write one line to descriptor N, then close it, once\n"
            "                          requests are served (for a supervisor)\n"
            "  --protect-path PATH     refuse new workspaces whose files would share PATH's\n"
            "                          filesystem (the embedded daemon protects PGDATA)\n"
            "  --setup-host USER       as root, once per boot: delegate a cgroup subtree to\n"
            "                          USER and (with --disk-bytes) put workspaces on a\n"
            "                          filesystem of their own; then exit\n"
            "  --disk-bytes N          with --setup-host: size of that filesystem (btrfs, with\n"
            "                          a disk quota per workspace sized by its tier)\n"
            "  --quota-slots N         with --setup-host: workspaces per tier that the disk\n"
            "                          quotas can hold, running or hibernated (default 128)\n"
            "  --no-expedited-rcu      with --setup-host: leave the kernel's RCU grace periods\n"
            "                          as they are (the first exec after an idle moment then\n"
            "                          waits 5-20 ms for its cgroup join)\n"
            "  --single-workspace ID   serve only workspace ID (the daemon inside a Kubernetes\n"
            "                          pod: one pod, one workspace)\n");
    exit(status);
}

/* Logs a fatal start-up problem and exits 1. */
static void die(const char *message)
{
    log_event("fatal: %s", message);
    exit(1);
}

/* Reads the first line of the token file (never logged). */
static char *read_token(const char *path)
{
    char line[4096];
    FILE *f = fopen(path, "re");
    if (!f || !fgets(line, sizeof line, f))
        die("cannot read --token-file");
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!*line)
        die("--token-file is empty");
    return strdup(line);
}

/* Parses a size flag. */
static size_t parse_size(const char *text, const char *flag)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (!*text || *end || v == 0) {
        log_event("fatal: %s needs a positive integer", flag);
        exit(2);
    }
    return (size_t)v;
}

/* Resolves --sandbox-user: as root any user (default nobody); otherwise only ourselves. */
static void resolve_sandbox_user(const char *name)
{
    if (!g_config.is_root) {
        g_config.sandbox_uid = getuid();
        g_config.sandbox_gid = getgid();
        struct passwd self;
        char buf[1024];
        if (name && (!user_lookup(NULL, getuid(), &self, buf, sizeof buf) ||
                     strcmp(name, self.pw_name) != 0))
            die("--sandbox-user can only be the daemon's own user when not root");
        return;
    }
    struct passwd pw;
    char buf[1024];
    if (!user_lookup(name ? name : "nobody", 0, &pw, buf, sizeof buf) || pw.pw_uid == 0)
        die("--sandbox-user must name an existing unprivileged user");
    g_config.sandbox_uid = pw.pw_uid;
    g_config.sandbox_gid = pw.pw_gid;
}

/* What --setup-host asks for (an install step, not a daemon run). */
static const char *setup_user;
static size_t setup_disk_bytes;
static unsigned setup_quota_slots = 128;
static bool cgroup_name_given;
static bool expedite_rcu = true;

/* Parses argv into g_config. */
static void parse_flags(int argc, char **argv)
{
    static const struct option options[] = {
        {"listen", 1, 0, 'l'},         {"token-file", 1, 0, 't'},   {"socket", 1, 0, 's'},
        {"state-dir", 1, 0, 'd'},      {"rootfs", 1, 0, 'r'},       {"sandbox-user", 1, 0, 'u'},
        {"release", 1, 0, 'R'},        {"max-body-bytes", 1, 0, 'B'},
        {"max-file-bytes", 1, 0, 'F'}, {"max-output-bytes", 1, 0, 'O'},
        {"max-kept-output-bytes", 1, 0, 'K'},
        {"bwrap", 1, 0, 'w'},          {"cgroup-name", 1, 0, 'c'},  {"help", 0, 0, 'h'},
        {"hibernate-on-exit", 0, 0, 'H'}, {"broker-dir", 1, 0, 'b'},
        {"test-resolve", 1, 0, 'T'},   {"protect-path", 1, 0, 'P'},
        {"setup-host", 1, 0, 'S'},     {"disk-bytes", 1, 0, 'D'},
        {"no-expedited-rcu", 0, 0, 'E'}, {"quota-slots", 1, 0, 'Q'},
        {"ready-fd", 1, 0, 'y'},       {"single-workspace", 1, 0, '1'},
        {"background-buffer-bytes", 1, 0, 'g'},
        {"background-buffer-total", 1, 0, 'j'},
        {"max-background-execs", 1, 0, 'G'},
        {"background-ttl", 1, 0, 'L'},
        {"standby", 1, 0, 'N'},
        {0, 0, 0, 0}};
    const char *token_file = NULL, *sandbox_user = NULL;
    int opt;
    g_config.is_root = geteuid() == 0;
    g_config.max_body_bytes = g_config.max_file_bytes = 64u << 20;
    g_config.max_output_bytes = 1u << 20;
    g_config.max_kept_output_bytes = 256u << 20;
    g_config.background_buffer_bytes = 4u << 20;
    g_config.background_buffer_total = 64u << 20;
    g_config.max_background_execs = 64;
    g_config.background_ttl_ms = 600 * 1000.0;
    g_config.standby = 1;
    g_config.bwrap_path = "/usr/bin/bwrap";
    g_config.cgroup_name = "mesh-sandboxd";
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'l': {
            char *colon = strrchr(optarg, ':');
            if (!colon)
                usage(2);
            g_config.listen_addr = strndup(optarg, (size_t)(colon - optarg));
            g_config.listen_port = atoi(colon + 1);
            break;
        }
        case 't': token_file = optarg; break;
        case 's': g_config.socket_path = optarg; break;
        case 'd': g_config.state_dir = optarg; break;
        case 'r': g_config.rootfs = optarg; break;
        case 'b': g_config.broker_dir = optarg; break;
        case 'u': sandbox_user = optarg; break;
        case 'R':
            if (strcmp(optarg, "destroy") != 0 && strcmp(optarg, "hibernate") != 0)
                usage(2);
            g_config.release_default =
                strcmp(optarg, "hibernate") == 0 ? RELEASE_HIBERNATE : RELEASE_DESTROY;
            break;
        case 'B': g_config.max_body_bytes = parse_size(optarg, "--max-body-bytes"); break;
        case 'F': g_config.max_file_bytes = parse_size(optarg, "--max-file-bytes"); break;
        case 'O': g_config.max_output_bytes = parse_size(optarg, "--max-output-bytes"); break;
        case 'K':
            g_config.max_kept_output_bytes = parse_size(optarg, "--max-kept-output-bytes");
            break;
        case 'g':
            g_config.background_buffer_bytes = parse_size(optarg, "--background-buffer-bytes");
            if (g_config.background_buffer_bytes == 0)
                die("--background-buffer-bytes must be at least 1");
            break;
        case 'j':
            g_config.background_buffer_total = parse_size(optarg, "--background-buffer-total");
            break;
        case 'G':
            g_config.max_background_execs = parse_size(optarg, "--max-background-execs");
            break;
        case 'L':
            g_config.background_ttl_ms = 1000.0 * (double)parse_size(optarg, "--background-ttl");
            break;
        case 'N': {
            char *end;
            unsigned long n = strtoul(optarg, &end, 10);
            if (!*optarg || *end || n > 64)
                die("--standby takes a number from 0 to 64");
            g_config.standby = (int)n;
            break;
        }
        case 'w': g_config.bwrap_path = optarg; break;
        case 'c': g_config.cgroup_name = optarg; cgroup_name_given = true; break;
        case 'P': g_config.protect_path = optarg; break;
        case 'S': setup_user = optarg; break;
        case 'D': setup_disk_bytes = parse_size(optarg, "--disk-bytes"); break;
        case 'E': expedite_rcu = false; break;
        case 'Q': {
            size_t n = parse_size(optarg, "--quota-slots");
            if (n < 1 || n > 65536)
                die("--quota-slots takes a number from 1 to 65536");
            setup_quota_slots = (unsigned)n;
            break;
        }
        case 'H': g_config.hibernate_on_exit = true; break;
        case 'y':
            g_config.ready_fd = (int)parse_size(optarg, "--ready-fd");
            fcntl(g_config.ready_fd, F_SETFD, FD_CLOEXEC);   /* never inherited by holders */
            break;
        case 'T':   /* TEST ONLY: the egress proxy resolves NAME to ADDR without DNS */
            if (!egress_add_test_name(optarg))
                die("--test-resolve takes NAME=IPADDRESS");
            fprintf(stderr, "mesh-sandboxd: --test-resolve %s is for tests only\n", optarg);
            break;
        case '1':
            if (!single_workspace_valid(optarg))
                die("--single-workspace takes a workspace id of letters, digits, '-', '_', '.'");
            g_config.single_workspace = optarg;
            break;
        case 'h': usage(0); break;
        default: usage(2);
        }
    }
    if (!g_config.state_dir || (!setup_user && !g_config.listen_addr && !g_config.socket_path))
        usage(2);
    if (g_config.listen_addr && !token_file)
        die("--listen requires --token-file");
    if (token_file)
        g_config.token = read_token(token_file);
    char *abs = realpath(g_config.state_dir, NULL);
    if (!abs && (!mkdir_p(g_config.state_dir, 0711) ||
                 !(abs = realpath(g_config.state_dir, NULL))))
        die("cannot create --state-dir");
    g_config.state_dir = abs;
    if (setup_user)
        return;
    resolve_sandbox_user(sandbox_user);
    if (!cgroup_name_given)
        host_config_load();
}

/* Takes the single-instance lock on the state dir (held until exit). */
static void lock_state_dir(void)
{
    char *path = xasprintf("%s/lock", g_config.state_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0)
        die("another mesh-sandboxd holds the state dir lock");
    free(path);
}

/* Makes sure fds 0-2 exist, so pipes never land there. */
static void ensure_std_fds(void)
{
    while (fcntl(2, F_GETFD) < 0 || fcntl(1, F_GETFD) < 0 || fcntl(0, F_GETFD) < 0) {
        int fd = open("/dev/null", O_RDWR);
        if (fd < 0 || fd > 2)
            break;
    }
}

/* Every running workspace keeps about ten descriptors open (namespaces, root, cgroups, egress
 * listener), so the inherited soft limit (often 1024) would cap the daemon at about 70
 * workspaces (workspace.c admits by descriptors). Raises the soft open-files limit to the hard
 * one, bounded so that a huge hard limit costs nothing; logs what it got. Sandbox processes
 * get the inherited limit back (programs that loop over every descriptor number stay fast). */
#define MAX_OPEN_FILES (1 << 20)
static void raise_open_files_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0)
        return;
    g_config.inherited_files = lim;
    rlim_t want = lim.rlim_max == RLIM_INFINITY || lim.rlim_max > MAX_OPEN_FILES
                      ? MAX_OPEN_FILES : lim.rlim_max;
    if (want > lim.rlim_cur) {
        lim.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
            log_event("cannot raise the open-files limit: %s", strerror(errno));
    }
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
        log_event("open-files limit %llu", (unsigned long long)lim.rlim_cur);
}

/* Reaps children of the main thread: orphans re-parented to us as subreaper and holders
 * whose starting thread has exited. */
static void reap_children(void)
{
    while (waitpid(-1, NULL, WNOHANG | __WALL | __WNOTHREAD) > 0)
        ;
}

/* The main thread's wait set: a signalfd, the watch pipe, then one pidfd per watched child. */
struct reaper {
    struct pollfd *fds;
    size_t count;
    size_t capacity;
};

/* Adds FD to the wait set, which grows as needed. */
static void reaper_add(struct reaper *r, int fd)
{
    if (r->count == r->capacity) {
        r->capacity = r->capacity ? 2 * r->capacity : 64;
        r->fds = realloc(r->fds, r->capacity * sizeof *r->fds);
        if (!r->fds)
            die("out of memory");
    }
    r->fds[r->count++] = (struct pollfd){.fd = fd, .events = POLLIN};
}

/* Takes every pidfd waiting in the watch pipe into the wait set. */
static void reaper_take_watches(struct reaper *r)
{
    int fd;
    while (read(reaper_watch_fd(), &fd, sizeof fd) == (ssize_t)sizeof fd)
        reaper_add(r, fd);
}

/* Reaps each watched child that has exited (unless the thread that started it already did)
 * and drops its pidfd. */
static void reaper_reap_watched(struct reaper *r)
{
    for (size_t i = 2; i < r->count;) {
        if (!(r->fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            i++;
            continue;
        }
        siginfo_t info;
        waitid(P_PIDFD, (id_t)r->fds[i].fd, &info, WEXITED | WNOHANG | __WALL);
        close(r->fds[i].fd);
        r->fds[i] = r->fds[--r->count];
    }
}

/* How often expired background records are swept: a minute, or half the time to live when that
 * is shorter, so that no record outlives its time by much. */
static double sweep_interval_ms(void)
{
    double half = g_config.background_ttl_ms / 2;
    return half < 60000 ? half : 60000;
}

/* poll's timeout until monotonic time DEADLINE (ms), at least 0. */
static int ms_until(double deadline)
{
    double left = deadline - monotonic_ms();
    return left > 0 ? (int)left + 1 : 0;
}

/* Sleeps until a handled signal arrives or a watched child exits, reaping on the way, and sweeps
 * expired background records on time however often it wakes (a busy host's children end
 * more often than once a minute: a sweep waiting for a quiet minute would never come); returns
 * the signal that asks the daemon to stop (SIGTERM or SIGINT). */
static int reaper_loop(const sigset_t *handled)
{
    struct reaper r = {0};
    int sigfd = signalfd(-1, handled, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0)
        die("cannot create the signalfd");
    reaper_add(&r, sigfd);
    reaper_add(&r, reaper_watch_fd());
    reap_children();   /* orphans that came before the signalfd */
    double next_sweep = monotonic_ms() + sweep_interval_ms();
    for (;;) {
        int n = poll(r.fds, r.count, ms_until(next_sweep));
        if (monotonic_ms() >= next_sweep) {
            workspaces_sweep_background();
            next_sweep = monotonic_ms() + sweep_interval_ms();
        }
        if (n <= 0) {
            if (n < 0 && errno != EINTR)
                die("cannot wait for signals and children");
            continue;
        }
        if (r.fds[1].revents & POLLIN)
            reaper_take_watches(&r);
        reaper_reap_watched(&r);
        struct signalfd_siginfo si;
        while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                free(r.fds);   /* its descriptors stay open until the daemon exits */
                return (int)si.ssi_signo;
            }
            if (si.ssi_signo == SIGCHLD)
                reap_children();
        }
    }
}

/* --ready-fd: tells the supervisor that requests are served now, so calls waiting for the
 * daemon to start go ahead at once. */
static void announce_ready(void)
{
    if (g_config.ready_fd <= 2)
        return;
    if (write(g_config.ready_fd, "ready\n", 6) != 6)
        log_event("cannot write to --ready-fd: %s", strerror(errno));
    close(g_config.ready_fd);
}

/* Start-up order matters: flags, lock, subreaper, signal mask (inherited by every thread),
 * the reaper's pipe, capabilities, base image, snapshots (leftovers removed), workspaces
 * (re-adoption), standbys (leftovers removed, the pool filled in the background), then
 * listeners; then reap until told to stop. */
int main(int argc, char **argv)
{
    sigset_t handled;
    umask(022);
    ensure_std_fds();
    parse_flags(argc, argv);
    if (setup_user)
        return host_setup(setup_user, setup_disk_bytes, setup_quota_slots, cgroup_name_given,
                          expedite_rcu);
    raise_open_files_limit();
    chmod(g_config.state_dir, 0711);
    lock_state_dir();
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);   /* spawned children share our memory: no ptrace */
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&handled);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGCHLD);
    sigaddset(&handled, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &handled, NULL);   /* every thread inherits the block */
    if (!reaper_watch_open())
        die("cannot create the reaper's pipe");
    cgroup_init();
    caps_detect();
    sandbox_init();
    snapshots_init();
    workspaces_init();
    standby_init();
    if (!http_start())
        die("cannot start listeners");
    log_event("ready (state dir %s, sandbox uid %d)", g_config.state_dir,
              (int)g_config.sandbox_uid);
    announce_ready();
    int sig = reaper_loop(&handled);
    log_event("%s: draining%s", sig == SIGTERM ? "SIGTERM" : "SIGINT",
              g_config.hibernate_on_exit ? " (commands in flight are killed)" : "");
    /* background commands end first (nobody could fetch them any more), so long polls on
     * their output answer; hibernating at exit bounds the drain too: no command outlives the
     * daemon */
    workspaces_kill_background();
    http_stop(g_config.hibernate_on_exit ? workspaces_kill_execs : NULL);
    workspaces_kill_background();   /* any started while the requests drained */
    standby_shutdown();
    if (g_config.hibernate_on_exit)
        workspaces_hibernate_all();
    log_event(g_config.hibernate_on_exit ? "stopped; workspaces hibernated"
                                         : "stopped; workspaces stay alive for the next start");
    return 0;
}
