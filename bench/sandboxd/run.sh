#!/bin/bash
# run.sh - builds mesh-sandboxd and the benchmark, starts a daemon on a temporary state dir
# (TCP on loopback, random port and token), acquires one workspace and runs bench.c against
# it: warm exec vs fork+exec, cold start vs a bare bwrap with the holder's own flags, CPU per
# warm exec. As root the daemon runs in a cpuacct group of its own, so its CPU (and, through
# the workspaces' groups, the sandboxes') is measured.
# Usage: bench/sandboxd/run.sh [ITERATIONS]   (exit 3 when a target is missed)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
N=${1:-200}
make -s -C "$REPO/src/sandboxd" || exit 1
cc -O2 -Wall -Wextra -Werror -o "$HERE/bench" "$HERE/bench.c" $(pkg-config --cflags --libs libcurl) || exit 1

WORK=$(mktemp -d /tmp/mesh-sd-bench.XXXXXX)
chmod 711 "$WORK"
echo "bench-$RANDOM$RANDOM" > "$WORK/token"
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"
TOKEN=$(cat "$WORK/token")
CGROUP=mesh-bench-$$
CPU_GROUP=/sys/fs/cgroup/cpuacct/$CGROUP-daemon
CPU_FILES=()
if [ "$(id -u)" = 0 ] && mkdir "$CPU_GROUP" 2>/dev/null; then
    CPU_FILES=("$CPU_GROUP/cpuacct.usage")
fi
(
    [ ${#CPU_FILES[@]} -gt 0 ] && echo "$BASHPID" > "$CPU_GROUP/cgroup.procs"
    exec "$REPO/src/sandboxd/mesh-sandboxd" --state-dir "$WORK/state" --listen "127.0.0.1:$PORT" \
        --token-file "$WORK/token" --cgroup-name "$CGROUP" 2>"$WORK/log"
) &
DAEMON=$!
cleanup() {
    for ws in bench bench-cold; do
        curl -s -m 10 -X DELETE -H "Authorization: Bearer $TOKEN" "$URL/v1/workspaces/$ws" >/dev/null
    done
    kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null
    for c in memory pids cpu cpuacct; do rmdir "/sys/fs/cgroup/$c/$CGROUP" 2>/dev/null; done
    rmdir "$CPU_GROUP" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
    curl -s -m 2 -H "Authorization: Bearer $TOKEN" "$URL/v1/capabilities" >/dev/null && break
    sleep 0.1
done
curl -s -m 30 -X PUT -H "Authorization: Bearer $TOKEN" "$URL/v1/workspaces/bench" >/dev/null
# the workspaces' groups are below the daemon's subtree in the cpuacct hierarchy
[ ${#CPU_FILES[@]} -gt 0 ] && CPU_FILES+=("/sys/fs/cgroup/cpuacct/$CGROUP/cpuacct.usage")
# the command line of a holder, on directories of its own (bench/lib.sh says why any will do)
. "$REPO/bench/lib.sh"
baseline_holder_cmdline "$WORK/state" "$DAEMON" "$WORK/bare" && cp "$WORK/bare/holder-cmdline" "$WORK/holder-cmdline"
[ -s "$WORK/holder-cmdline" ] || { echo "cannot find the holder's bwrap" >&2; exit 1; }
SANDBOX_UID=0
[ "$(id -u)" = 0 ] && SANDBOX_UID=$(id -u nobody)
"$HERE/bench" "$URL" "$WORK/token" bench "$N" "$SANDBOX_UID" "$WORK/holder-cmdline" "${CPU_FILES[@]}"
