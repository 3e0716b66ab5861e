#!/usr/bin/env bash
# bench/docker_background.sh: what the docker driver's background commands cost on the Engine
# API, as ratios against an ordinary exec measured in the same run (the driver's own request
# sequences, without the extension, over one keep-alive connection like the worker's):
#   start    claim exec + wrapper exec create + detached start + exec inspect
#   output   one output call whose bytes are already there
#   baseline exec create + attached start + inspect of /bin/true (what mesh_exec pays)
#   first byte  a running command prints; a waiting output call returns with it: the delay,
#            from /proc/uptime in the container and on the host (10 ms resolution)
#
#   sudo bench/docker_background.sh [ITERATIONS]     (default 15; a private dockerd, stopped at exit)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-15}
. test/lib/docker.sh
WORK=$(mktemp -d /tmp/mesh-bench-dbg.XXXXXX); chmod 711 "$WORK"
trap 'mesh_docker_stop; rm -rf "$WORK"' EXIT
cc -Wall -Wextra -Werror -std=gnu11 -I src -o "$WORK/bg_tool" test/docker/bg_tool.c src/backends/docker_background.c
mesh_docker_start "$WORK/docker"
mesh_docker_image mesh-bench-bg
docker run -d --name mesh-bench-bg --init --user 1000:1000 --network none --read-only --cap-drop ALL \
  --security-opt no-new-privileges --mount type=volume,target=/workspace \
  --mount type=volume,target=/run/mesh --entrypoint /bin/sleep mesh-bench-bg 2147483647 >/dev/null
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/docker/docker.sock" "$WORK/bg_tool" "$N" <<'PY'
import http.client, json, socket, statistics, subprocess, sys, time
sock, tool, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

class Conn(http.client.HTTPConnection):
    def __init__(self): super().__init__("localhost")
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sock)
conn = Conn()

def call(method, path, body=None):
    conn.request(method, "/v1.41" + path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse(); return r.read()

def run(cmd, detach=False):
    exec_id = json.loads(call("POST", "/containers/mesh-bench-bg/exec", {
        "AttachStdin": False, "AttachStdout": not detach, "AttachStderr": not detach,
        "Cmd": cmd, "User": "1000:1000", "WorkingDir": "/workspace"}))["Id"]
    return exec_id, call("POST", f"/exec/{exec_id}/start", {"Detach": detach, "Tty": False})

def stdout_of(stream):
    out, p = b"", 0
    while p < len(stream):
        size = int.from_bytes(stream[p + 4:p + 8], "big")
        out += stream[p + 8:p + 8 + size] if stream[p] == 1 else b""
        p += 8 + size
    return out

script = {s: subprocess.run([tool, "script", s], capture_output=True, check=True).stdout.decode()
          for s in ("claim", "wrapper", "output")}
def sh(name, *args): return ["/bin/sh", "-c", script[name], "mesh", *args]
def start(key, *argv):
    run(sh("claim", key))
    exec_id, _ = run(sh("wrapper", key, "0", ".", *argv), detach=True)
    call("GET", f"/exec/{exec_id}/json")

base, starts, outputs, first = [], [], [], []
for i in range(n):
    t = time.perf_counter(); exec_id, _ = run(["/bin/true"]); call("GET", f"/exec/{exec_id}/json")
    base.append(time.perf_counter() - t)
    t = time.perf_counter(); start(f"s{i}", "echo", "hi"); starts.append(time.perf_counter() - t)
    time.sleep(0.2)
    t = time.perf_counter(); run(sh("output", f"s{i}", "0", "0", "0", "65536")); outputs.append(time.perf_counter() - t)
    start(f"f{i}", "sh", "-c", "sleep 0.3; read u _ </proc/uptime; echo $u")
    _, answer = run(sh("output", f"f{i}", "0", "0", "200", "65536"))
    now = float(open("/proc/uptime").read().split()[0])
    first.append(now - float(stdout_of(answer).split(b"\n", 1)[1].split()[0]))

med, b = statistics.median, statistics.median(base)
print(f"{'what':<12} {'median ms':>10} {'ratio to baseline':>18}")
print(f"{'baseline':<12} {b * 1000:>10.1f} {1:>18.2f}")
print(f"{'start':<12} {med(starts) * 1000:>10.1f} {med(starts) / b:>18.2f}")
print(f"{'output':<12} {med(outputs) * 1000:>10.1f} {med(outputs) / b:>18.2f}")
first.sort()
print(f"{'first byte':<12} {med(first) * 1000:>10.0f} {'(max %.0f ms)' % (first[-1] * 1000):>18}")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
