#!/bin/bash
# run.sh - builds mesh-sandboxd and the benchmark, starts a daemon on a temporary state dir
# (TCP on loopback, random port and token), acquires one workspace and runs bench.c against
# it. Usage: bench/sandboxd/run.sh [ITERATIONS]   (exit 3 when warm exec misses 1.5x)
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
"$REPO/src/sandboxd/mesh-sandboxd" --state-dir "$WORK/state" --listen "127.0.0.1:$PORT" \
    --token-file "$WORK/token" --cgroup-name "mesh-bench-$$" 2>"$WORK/log" &
DAEMON=$!
cleanup() {
    curl -s -m 10 -X DELETE -H "Authorization: Bearer $TOKEN" "$URL/v1/workspaces/bench" >/dev/null
    kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null
    for c in memory pids cpu cpuacct; do rmdir "/sys/fs/cgroup/$c/mesh-bench-$$" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
    curl -s -m 2 -H "Authorization: Bearer $TOKEN" "$URL/v1/capabilities" >/dev/null && break
    sleep 0.1
done
curl -s -m 30 -X PUT -H "Authorization: Bearer $TOKEN" "$URL/v1/workspaces/bench" >/dev/null
SANDBOX_UID=0
[ "$(id -u)" = 0 ] && SANDBOX_UID=$(id -u nobody)
"$HERE/bench" "$URL" "$WORK/token" bench "$N" "$SANDBOX_UID"
