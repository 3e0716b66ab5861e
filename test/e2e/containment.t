#!/usr/bin/env bash
# The database is protected from its sandboxes, on the README's path (the embedded daemon as
# postgres, after mesh-sandboxd --setup-host): with the server in a 2 GiB memory cgroup made
# here, a workspace filling /tmp or allocating memory gets its own exec killed (status oom),
# never a PostgreSQL process; a fork bomb leaves the server accepting connections; filling
# /workspace never fails a PostgreSQL write; 12 workspaces hoarding broker and proxy
# connections leave another run working.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to make the server's memory cgroup"
[ -d /sys/fs/cgroup/memory ] || skip_all "no cgroup v1 memory hierarchy on this host (docs/sandboxd.md)"
plan 18
SOCK="$PGDIR/data/mesh_sandboxd/sandboxd.sock"
STATE="$PGDIR/data/mesh_sandboxd"
caps=$(curl -s -m 5 --unix-socket "$SOCK" http://l/v1/capabilities)
is "$(echo "$caps" | jq -r '[.capabilities.resource_limits,.capabilities.compute_metering,.capabilities.disk_limits]|map(tostring)|join(",")')" \
   "true,true,true" "the embedded daemon enforces limits (resource_limits, compute_metering, disk_limits)"

# --- the server in a 2 GiB memory cgroup: the postmaster, its children and the daemon (not
# the workspaces' holders, which are in their own groups); put back on exit
MEMCG=/sys/fs/cgroup/memory/mesh-e2e-server-$$
mkdir "$MEMCG" && echo $((2 << 30)) > "$MEMCG/memory.limit_in_bytes"
PM=$(head -1 "$PGDIR/data/postmaster.pid")
DAEMON=$(pgrep -u postgres -f "^mesh-sandboxd --socket $STATE/" | head -1)
declare -A HOME_CG
for pid in "$PM" $(pgrep -P "$PM") $DAEMON; do
  HOME_CG[$pid]=$(awk -F: '$2 == "memory" {print $3}' "/proc/$pid/cgroup")
  echo "$pid" > "$MEMCG/cgroup.procs" 2>/dev/null
done
restore() {
  local pid
  for pid in $(cat "$MEMCG/cgroup.procs" 2>/dev/null); do
    echo "$pid" > "/sys/fs/cgroup/memory${HOME_CG[$pid]:-/}/cgroup.procs" 2>/dev/null ||
      echo "$pid" > /sys/fs/cgroup/memory/cgroup.procs 2>/dev/null
  done
  rmdir "$MEMCG" 2>/dev/null
  rm -rf "$WORK"
}
WORK=$(mktemp -d)
trap restore EXIT
is "$(grep -c . "$MEMCG/cgroup.procs")" "$(( $(pgrep -P "$PM" | wc -l) + 2 ))" "the server and the daemon run in a 2 GiB memory group"

LOG_START=$(($(stat -c %s "$PGDIR/server.log") + 1))   # only this test's part of the log counts
backends() { q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type <> 'client backend'"; }
before=$(backends)
q "SELECT mesh.agent_set('contain-agent', default_size => 'small')" >/dev/null
for r in ct-fork ct-disk; do q "SELECT 1 FROM mesh_acquire('$r-$$', 'contain-agent', 'e2e')" >/dev/null; done
# a run that runs out of memory raises its agent's tier (mesh.tier_climbs): the hogs have an
# agent of their own, and both are materialized at "small" before either runs
q "SELECT mesh.agent_set('contain-hog', default_size => 'small')" >/dev/null
for r in ct-tmp ct-mem; do
  q "SELECT 1 FROM mesh_acquire('$r-$$', 'contain-hog', 'e2e')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('$r-$$', ARRAY['true'])" >/dev/null 2>&1
done

is "$(q "SELECT status FROM mesh_exec('ct-tmp-$$', ARRAY['sh','-c','head -c 2600M /dev/zero > /tmp/fill'])")" oom \
   "a workspace filling /tmp with 2.5 GiB: its exec is oom"
is "$(q "SELECT status FROM mesh_exec('ct-mem-$$', ARRAY['python3','-c','b = [bytearray(64 << 20) for _ in range(1000)]'])")" oom \
   "a workspace allocating memory without end: its exec is oom"
is "$(awk '/^oom_kill /{print $2}' "$MEMCG/memory.oom_control")" 0 "no OOM kill in the server's group"
is "$(backends)" "$before" "every background process of the server is the one it was (none was killed)"
tail -c +"$LOG_START" "$PGDIR/server.log" | grep -q "terminated by signal 9"; ok $((! $?)) "the server log shows no process killed"

# --- a fork bomb, bounded by the exec's timeout; the server keeps accepting connections
psql -X -qAt -c "SELECT status, exit_code FROM mesh_exec('ct-fork-$$', ARRAY['bash','-c','b(){ b|b& }; b; sleep 4'], timeout => '20 s')" \
  > "$WORK/bomb" 2>/dev/null & bp=$!
for _ in $(seq 1 100); do   # until the bomb has filled its pids limit
  [ "$(cat /sys/fs/cgroup/pids/"$(jq -r .cgroup_name "$STATE/host.json")"/*/pids.current 2>/dev/null | sort -n | tail -1)" -ge 100 ] 2>/dev/null && break
  sleep 0.1
done
conns=0
for _ in 1 2 3 4 5; do psql -X -qAt -c "SELECT 1" >/dev/null 2>&1 && conns=$((conns + 1)); done
is "$conns" 5 "while a fork bomb runs, new connections to the server succeed"
wait $bp
is "$(cut -d'|' -f1 "$WORK/bomb")" ok "the fork bomb's exec ends and is recorded"
is "$(q "SELECT stdout FROM mesh_exec('ct-fork-$$', ARRAY['echo','alive'])")" alive "its workspace works afterwards"

# --- filling /workspace: its own filesystem fills, PostgreSQL's writes do not fail
r=$(q "SELECT stderr FROM mesh_exec('ct-disk-$$', ARRAY['sh','-c','head -c 2G /dev/zero > fill'])")
echo "$r" | grep -q "Disk quota exceeded"; ok $? "filling /workspace stops at the workspace's quota on the workspaces' filesystem"
q "CREATE TABLE ct_write AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 200000) g; CHECKPOINT" >/dev/null
ok $? "PostgreSQL writes 40 MB and checkpoints while it is full"
is "$(q "SELECT count(*) FROM ct_write")" 200000 "and reads them back"
q "DROP TABLE ct_write" >/dev/null
q "SELECT mesh_release('ct-disk-$$')" >/dev/null   # its files go, the filesystem has room again

# --- 12 workspaces hoarding broker connections (from the host side of their own sockets)
q "SELECT mesh.secret_set('contain-agent', 'k', 'v-$RANDOM')" >/dev/null
q "SELECT mesh.environment_set('contain-env', '[{\"kind\": \"secret\", \"name\": \"k\"}]')" >/dev/null
for i in $(seq 1 13); do
  q "SELECT 1 FROM mesh_acquire('ct-h$i-$$', 'contain-agent', 'e2e', environment => 'contain-env')" >/dev/null
  q "SELECT exit_code FROM mesh_exec('ct-h$i-$$', ARRAY['true'])" >/dev/null
done
# hoard.py KIND COUNT MARKER OUT STOP TARGET...: opens COUNT connections to each TARGET (unix
# socket paths, or TCP ports on 127.0.0.1), writes "held refused" (a refusal is an answer
# containing MARKER) to OUT, and holds the rest until STOP exists (bounded)
cat > "$WORK/hoard.py" <<'PY'
import os, socket, sys, time
kind, count, marker, out, stop = sys.argv[1:6]
socks, refused = [], 0
for target in sys.argv[6:]:
    for _ in range(int(count)):
        s = socket.socket(socket.AF_UNIX if kind == "unix" else socket.AF_INET)
        s.connect(target if kind == "unix" else ("127.0.0.1", int(target)))
        socks.append(s)
time.sleep(0.5)
for s in socks:
    s.setblocking(False)
    try:
        if marker.encode() in s.recv(512): refused += 1
    except BlockingIOError:
        pass
open(out, "w").write("%d %d\n" % (len(socks) - refused, refused))
for _ in range(1200):
    if os.path.exists(stop): break
    time.sleep(0.05)
PY
chmod 755 "$WORK"; chmod 644 "$WORK/hoard.py"   # the server reads it
socks=()
for i in $(seq 1 12); do
  socks+=("$PGDIR/data/mesh_broker/$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'ct-h$i-$$'")/broker.sock")
done
timeout 60 python3 "$WORK/hoard.py" unix 20 too_many_connections "$WORK/hoard.out" "$WORK/stop" "${socks[@]}" & hp=$!
for _ in $(seq 1 100); do [ -s "$WORK/hoard.out" ] && break; sleep 0.1; done
is "$(cat "$WORK/hoard.out")" "96 144" "12 workspaces hoarding 20 broker connections each hold 8 each; the rest are refused too_many_connections"
got=$(q "SELECT stdout FROM mesh_exec('ct-h13-$$', ARRAY['sh','-c','curl -s -m 5 --unix-socket /run/mesh/broker.sock -X POST -H \"Authorization: Bearer \$(cat /workspace/.mesh/run-token)\" http://mesh/v1/secrets/k'])")
echo "$got" | grep -q '"value"'; ok $? "another run still gets its secret from the broker"

# --- and hoarding egress proxy connections from inside 12 sandboxes
for i in $(seq 1 12); do
  q "SELECT mesh_write_file('ct-h$i-$$', 'hoard.py', pg_read_binary_file('$WORK/hoard.py'))" >/dev/null
  psql -X -qAt -c "SELECT status FROM mesh_exec('ct-h$i-$$', ARRAY['python3','hoard.py','tcp','80','X-Mesh-Egress-Refused','/workspace/hoarding','/workspace/stop','3128'], timeout => '60 s')" > "$WORK/ph$i" 2>&1 &
done
for _ in $(seq 1 300); do
  [ "$(ls "$STATE"/workspaces/*/store/files/hoarding 2>/dev/null | wc -l)" -ge 12 ] && break; sleep 0.1
done
held=$(cat "$STATE"/workspaces/*/store/files/hoarding 2>/dev/null | awk '{h+=$1; r+=$2} END {print h+0, r+0}')
like_held=$(echo "$held" | awk '{print ($1 >= 96 && $1 <= 12*64 && $2 > 0) ? "yes" : "no"}')
is "$like_held" yes "12 workspaces opening 80 proxy connections each: held and refused ($held)"
r=$(q "SELECT stdout FROM mesh_exec('ct-h13-$$', ARRAY['sh','-c','curl -s -m 5 -o /dev/null -w \"%{http_code}\" -x http://127.0.0.1:3128 http://10.1.2.3/'])")
is "$r" 403 "another run's exec starts and its proxy answers (a private address: 403)"
for i in $(seq 1 12); do touch "$STATE/workspaces/$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'ct-h$i-$$'")/store/files/stop"; done
touch "$WORK/stop"
wait
is "$(cat "$WORK"/ph* | sort | uniq -c | awk '{print $1, $2}')" "12 ok" "the hoarders' execs end normally when told"
for r in ct-tmp ct-mem ct-fork $(seq -f 'ct-h%g' 1 13); do q "SELECT mesh_release('$r-$$')" >/dev/null 2>&1; done
done_testing
