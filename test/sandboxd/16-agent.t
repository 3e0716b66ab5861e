#!/bin/bash
# The exec agent, the resident process in every sandbox that starts its commands: it runs
# inside the sandbox's namespaces with CAP_SYS_ADMIN of the workspace's own user namespace
# only, under the filter and no_new_privs; no command inherits its channel, reaches its
# descriptors, signals it or takes its place; its death mid-exec is a prompt, clear error,
# and the next acquire brings the workspace back.
. "$(dirname "$0")/lib.sh"
[ "$(uname -m)" = x86_64 ] || skip_all "system-call numbers below are x86-64's"
plan 16

holder_of() { jq -r .holder_pid "$SD_STATE/workspaces/$1/meta.json"; }
# the agent as a command sees it: pid 1 of the workspace's /proc
PROBE='import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    try:
        r = call()
        print(name, "ok" if r is None or r >= 0 else errno.errorcode[ctypes.get_errno()])
    except OSError as e:
        print(name, errno.errorcode[e.errno])
fds = os.listdir("/proc/self/fd")
print("fds", len(fds), sum(os.readlink("/proc/self/fd/" + f).startswith("socket:") for f in fds if os.path.exists("/proc/self/fd/" + f)))
attempt("list_agent_fds", lambda: len(os.listdir("/proc/1/fd")))
attempt("open_agent_channel", lambda: os.open("/proc/1/fd/11", os.O_RDWR))
attempt("agent_exe", lambda: len(os.readlink("/proc/1/exe")))
attempt("agent_mem", lambda: os.open("/proc/1/mem", os.O_RDONLY))
procfd = os.open("/proc/1", os.O_RDONLY)
attempt("pidfd_getfd", lambda: libc.syscall(438, procfd, 11, 0))
attempt("pidfd_signal", lambda: libc.syscall(424, procfd, signal.SIGKILL, None, 0))
attempt("ptrace_agent", lambda: libc.syscall(101, 16, 1, None, None))   # PTRACE_ATTACH pid 1
'

sd_start
new_ws ag
holder=$(holder_of ag)
st=$(grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "/proc/$holder/status" | tr -s '\t' ' ')
like "$st" "CapEff: 0000000000200000" "the agent keeps CAP_SYS_ADMIN alone"
is "$(echo "$st" | grep -cE '^Cap(Inh|Bnd|Amb): 0000000000000000$')" 3 "its bounding, inheritable and ambient sets are empty"
like "$st" "NoNewPrivs: 1" "no_new_privs is set on it"
[ "$(readlink "/proc/$holder/ns/user")" != "$(readlink /proc/self/ns/user)" ]
ok $? "its capability is the workspace's user namespace's, not the host's"
is "$(stat -c %u "/proc/$holder/fd")" 0 "it is not dumpable (its /proc entries are root's)"

api PUT "/v1/workspaces/ag/files?path=probe.py" "$PROBE" >/dev/null
out=$(stdout_of "$(exec_json ag '{"argv":["python3","probe.py"]}')")
result() { echo "$out" | awk -v c="$1" '$1 == c {print $2" "$3}' | sed 's/ $//'; }
is "$(result fds)" "4 0" "a command holds stdio (and its own listing) only, no socket"
is "$(result list_agent_fds)" EACCES "a command cannot list the agent's descriptors"
is "$(result open_agent_channel)" EACCES "nor open its channel through /proc"
is "$(result agent_exe)" EACCES "nor read its binary's link"
is "$(result agent_mem)" EACCES "nor its memory"
like "$(result pidfd_getfd)" "^(EBADF|EPERM|ESRCH)$" "nor take its descriptors with pidfd_getfd"
like "$(result pidfd_signal)" "^(EINVAL|EPERM)$" "nor signal it through /proc"
run_sh ag 'kill -KILL -1; exit 0' >/dev/null
is "$(stdout_of "$(run_sh ag 'echo still-served')")" still-served "kill -1 from a command leaves the agent serving"

# the agent's death while a command runs: a prompt, clear error
(exec_json ag '{"argv":["sleep","30"]}' > "$SD_DIR/inflight"; date +%s > "$SD_DIR/answered") &
client=$!
for _ in $(seq 1 50); do pgrep -f -P "$holder" >/dev/null 2>&1 && break; sleep 0.1; done
sleep 0.5
started=$(date +%s)
kill -KILL "$holder"
wait "$client"
is "$(err_code "$(cat "$SD_DIR/inflight")")" workspace_not_running "an exec in flight when the agent dies answers workspace_not_running"
ok $(( $(cat "$SD_DIR/answered") - started > 10 )) "at once, not after the command's own time"
new_ws ag
is "$(stdout_of "$(run_sh ag 'echo back')")" back "acquire starts a new agent and execs run again"
finish
