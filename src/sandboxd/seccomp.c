/*
 * seccomp.c - the system-call filter of every workspace process.
 *
 * Namespaces and dropped capabilities keep a sandbox away from the host's files and processes,
 * but the kernel itself is shared: some system calls reach state that namespaces do not split
 * (kernel keyrings are per uid, and every workspace runs as the same uid) or large kernel attack
 * surface that no build or test needs. Modelled on the container engines' default profile,
 * the filter answers EPERM (not a kill, so programs degrade the way they do on a locked-down
 * host) to: kernel keyrings, bpf, perf_event_open, userfaultfd, io_uring, module loading,
 * kexec, the mount family, new user namespaces (unshare/clone with CLONE_NEWUSER; clone3,
 * whose flags a filter cannot read, answers ENOSYS so libc falls back to clone), setns, and
 * host administration (reboot, swap, clocks, accounting, quotas, syslog, raw I/O ports,
 * handle-based opens), and the ioctls that make btrfs subvolumes and snapshots (a way out of
 * the workspace's disk quota, quota.c).
 *
 * The filter is built once at start with libseccomp and kept as a BPF program. The holder gets
 * it through bubblewrap's --seccomp (applied after bubblewrap's own mounts, just before the
 * holder's command); every exec installs it itself in its init helper, after no_new_privs and
 * before the command, because an exec joins the namespaces with setns and never passes through
 * bubblewrap.
 */
#include "seccomp.h"
#include "log.h"
#include "util.h"
#include <errno.h>
#include <linux/btrfs.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Denied outright (EPERM). Names this architecture lacks are skipped. */
static const char *denied_calls[] = {
    /* kernel keyrings: per uid, so a channel between workspaces */
    "add_key", "keyctl", "request_key",
    /* kernel attack surface no build needs */
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "lookup_dcookie",
    /* modules and kexec */
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load",
    /* the mount family (bubblewrap's own mounts happen before the filter) */
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr",
    /* entering other namespaces */
    "setns",
    /* host administration */
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday",
    "stime", "clock_settime", "clock_adjtime", "ioperm", "iopl", "open_by_handle_at",
    "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "vm86", "vm86old",
    NULL};

/* Calls denied only when their flags ask for a new user namespace (argument 0 is the flags
 * word of both on the architectures the filter covers). */
static const char *userns_calls[] = {"unshare", "clone", NULL};

static struct sock_filter *program;   /* the exported BPF program, NULL when unavailable */
static unsigned short program_len;    /* in instructions */

/* Adds every rule to CTX; false when libseccomp refuses one that exists here. */
static bool add_rules(scmp_filter_ctx ctx)
{
    for (int i = 0; denied_calls[i]; i++) {
        int nr = seccomp_syscall_resolve_name(denied_calls[i]);
        if (nr != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0)
            return false;
    }
    for (int i = 0; userns_calls[i]; i++) {
        int nr = seccomp_syscall_resolve_name(userns_calls[i]);
        if (nr != __NR_SCMP_ERROR &&
            seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) != 0)
            return false;
    }
    /* btrfs subvolumes and snapshots: a new one would have a quota group of its own, outside
     * the workspace's disk quota (quota.c); the request number is 32 bits wide */
    static const unsigned long subvolume_ioctls[] = {
        BTRFS_IOC_SUBVOL_CREATE, BTRFS_IOC_SUBVOL_CREATE_V2, BTRFS_IOC_SNAP_CREATE,
        BTRFS_IOC_SNAP_CREATE_V2};
    for (size_t i = 0; i < sizeof subvolume_ioctls / sizeof subvolume_ioctls[0]; i++)
        if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL,
                                     subvolume_ioctls[i])) != 0)
            return false;
    int clone3 = seccomp_syscall_resolve_name("clone3");
    return clone3 == __NR_SCMP_ERROR || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0) == 0;
}

/* Exports CTX's BPF program into memory (through a memfd: libseccomp 2.5 writes to an fd). */
static bool export_program(scmp_filter_ctx ctx)
{
    int fd = memfd_create("mesh-seccomp", MFD_CLOEXEC);
    bool ok = fd >= 0 && seccomp_export_bpf(ctx, fd) == 0;
    off_t size = ok ? lseek(fd, 0, SEEK_END) : 0;
    ok = ok && size > 0 && size % sizeof(struct sock_filter) == 0 &&
         size / sizeof(struct sock_filter) <= BPF_MAXINSNS;
    if (ok) {
        program = malloc((size_t)size);
        ok = pread(fd, program, (size_t)size, 0) == size;
        program_len = (unsigned short)(size / sizeof(struct sock_filter));
    }
    if (fd >= 0)
        close(fd);
    if (!ok) {
        free(program);
        program = NULL;
    }
    return ok;
}

/* Builds the filter; false (and no filter) when libseccomp cannot. On x86-64 the 32-bit
 * entry points get the same rules, so int 0x80 is no way around them. */
static bool seccomp_build(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return false;
    if (seccomp_arch_native() == SCMP_ARCH_X86_64)
        seccomp_arch_add(ctx, SCMP_ARCH_X86);
    bool ok = add_rules(ctx) && export_program(ctx);
    seccomp_release(ctx);
    return ok;
}

/* Installs the filter on the calling task; no_new_privs must be set. Only system calls: exec
 * helpers call this while sharing the daemon's memory. True when there is no filter. */
CHILD_ENTRY bool seccomp_apply(void)
{
    struct sock_fprog prog = {.len = program_len, .filter = program};
    return !program || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

/* A memfd holding the filter for bubblewrap's --seccomp, positioned at its start; -1 when
 * there is no filter. Called in the forked holder child (system calls only). */
CHILD_ENTRY int seccomp_program_fd(void)
{
    if (!program)
        return -1;
    int fd = memfd_create("mesh-seccomp", 0);
    size_t len = program_len * sizeof(struct sock_filter);
    if (fd >= 0 && (write(fd, program, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Start-up: builds the filter and proves it works here (a child installs it and must see
 * add_key refused with EPERM). Only then is the seccomp capability true; otherwise workspaces
 * run without a filter and say so. */
bool seccomp_detect(void)
{
    if (!seccomp_build()) {
        log_event("seccomp: cannot build the system-call filter; workspaces run without one");
        return false;
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !seccomp_apply())
            _exit(1);
        long r = syscall(SYS_add_key, "user", "mesh-probe", "x", 1, -4 /* user keyring */);
        _exit(r < 0 && errno == EPERM ? 0 : 1);
    }
    int status = 1;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    bool ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
        log_event("seccomp: the kernel refused the system-call filter; workspaces run without one");
        free(program);
        program = NULL;
    }
    return ok;
}
