#!/bin/bash
# The system-call filter: every exec and every holder runs under it (root and non-root
# daemon); kernel keyrings are no channel between workspaces; bpf, userfaultfd, io_uring,
# perf_event_open, module loading, mount and new user namespaces answer EPERM (clone3 ENOSYS,
# so libc falls back to clone); ordinary tools (sh, python3 threads, cc) still work.
. "$(dirname "$0")/lib.sh"
[ "$(uname -m)" = x86_64 ] || skip_all "system-call numbers below are x86-64's"
plan 20

# The probe: calls one system call by number through ctypes and prints "ok" or the errno name.
PROBE='import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "add_key": (248, b"user", b"mesh-key", b"payload", 7, -4),       # KEY_SPEC_USER_KEYRING
    "request_key": (249, b"user", b"mesh-key", None, 0),
    "keyctl": (250, 0, -4, 0),                                       # KEYCTL_GET_KEYRING_ID
    "bpf": (321, 0, None, 0),                                        # BPF_MAP_CREATE
    "userfaultfd": (323, 1),                                         # UFFD_USER_MODE_ONLY
    "io_uring_setup": (425, 1, None),
    "perf_event_open": (298, None, 0, -1, -1, 0),
    "init_module": (175, None, 0, b""),
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, None),
    "unshare_user": (272, 0x10000000),                               # CLONE_NEWUSER
    "clone3": (435, None, 0),
}
for name in sys.argv[1:]:
    nr, *args = calls[name]
    r = libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()])
'
# probe WS CALL... -> "CALL RESULT" lines
probe() {
    local ws=$1; shift
    api PUT "/v1/workspaces/$ws/files?path=probe.py" "$PROBE" >/dev/null
    stdout_of "$(exec_json "$ws" "$(jq -nc --args '{argv:(["python3","probe.py"]+$ARGS.positional)}' "$@")")"
}
result() { echo "$1" | awk -v c="$2" '$1 == c {print $2}'; }

sd_start
caps=$(api GET /v1/capabilities)
is "$(field "$caps" .capabilities.seccomp)" true "capabilities report seccomp"
new_ws sa
new_ws sb
r=$(run_sh sa 'grep "^Seccomp:" /proc/self/status')
like "$(stdout_of "$r")" "Seccomp:[[:space:]]+2" "an exec runs under a filter"
holder=$(jq -r .holder_pid "$SD_STATE/workspaces/sa/meta.json")
like "$(grep '^Seccomp:' "/proc/$holder/status")" "Seccomp:[[:space:]]+2" "the holder too"

out=$(probe sa add_key keyctl)
is "$(result "$out" add_key)" EPERM "workspace A cannot add a key to the uid's keyring"
is "$(result "$out" keyctl)" EPERM "nor reach it with keyctl"
out=$(probe sb request_key keyctl)
is "$(result "$out" request_key)" EPERM "workspace B cannot look a key up"
is "$(result "$out" keyctl)" EPERM "nor read any keyring"
out=$(probe sa bpf userfaultfd io_uring_setup perf_event_open init_module mount unshare_user clone3)
is "$(result "$out" bpf)" EPERM "bpf: EPERM"
is "$(result "$out" userfaultfd)" EPERM "userfaultfd (user mode only): EPERM"
is "$(result "$out" io_uring_setup)" EPERM "io_uring_setup: EPERM"
is "$(result "$out" perf_event_open)" EPERM "perf_event_open: EPERM"
is "$(result "$out" init_module)" EPERM "init_module: EPERM"
is "$(result "$out" mount)" EPERM "mount: EPERM"
is "$(result "$out" unshare_user)" EPERM "unshare of a new user namespace: EPERM"
is "$(result "$out" clone3)" ENOSYS "clone3: ENOSYS (libc falls back to clone)"

r=$(run_sh sa 'echo hi | tr a-z A-Z; python3 -c "
import threading, subprocess
t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join()
print(subprocess.run([\"sh\", \"-c\", \"echo child\"], capture_output=True, text=True).stdout.strip())"')
is "$(stdout_of "$r")" "$(printf 'HI\nthread\nchild')" "sh, pipes, python3 threads and subprocesses work"
if [ -x /usr/bin/cc ]; then
    run_sh sa 'printf "#include <stdio.h>\nint main(void){puts(\"compiled\");return 0;}\n" > c.c' >/dev/null
    r=$(run_sh sa 'cc -o c c.c && ./c')
    is "$(stdout_of "$r")" compiled "cc compiles and the program runs"
else
    skip "no cc on this host"
fi
api DELETE /v1/workspaces/sa >/dev/null

# the embedded case: a non-root daemon filters the same way
if id postgres >/dev/null 2>&1; then
    sd_start_as postgres
    is "$(field "$(api GET /v1/capabilities)" .capabilities.seccomp)" true "non-root: seccomp capability"
    new_ws nr
    out=$(probe nr add_key unshare_user)
    is "$(result "$out" add_key)" EPERM "non-root: add_key EPERM"
    is "$(result "$out" unshare_user)" EPERM "non-root: new user namespaces EPERM"
else
    skip "no postgres user"; skip "no postgres user"; skip "no postgres user"
fi
finish
