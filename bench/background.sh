#!/usr/bin/env bash
# bench/background.sh: first-byte latency of a background command's output, measured in one run.
#
#   sudo bench/background.sh [LINES]
#
# A command prints LINES lines, 100 ms apart, each with the time it was printed.  Latency of a
# line = when a client has it - when it was printed:
#   1. mesh: the command runs with mesh_exec_start in a warm workspace (embedded daemon); a
#      psycopg2 client LISTENs on its mesh_exec_channel and reads each line with mesh_exec_output
#      when notified (the README's pattern);
#   2. baseline: the same command on the host, its stdout a local pipe the client reads.
# Prints p50 and p99 of each and their ratio.  mesh.exec_notify_interval (50 ms) bounds how
# often a command's output is stored and notified: the floor of mesh's latency is about half
# of it on average for a line that comes at a random time.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-100}
. bench/lib.sh
bench_cluster 2
PY=/usr/bin/python3
PRINTER='for i in $(seq 1 '"$LINES"'); do echo "$(date +%s.%N)"; sleep 0.1; done'
psql -X -q -c "SELECT 1 FROM mesh_acquire('bench-bg', 'bench', 'bench')" \
     -c "SELECT exit_code FROM mesh_exec('bench-bg', ARRAY['true'])" >/dev/null

"$PY" - "$PRINTER" <<'EOF'
import json, select, statistics, subprocess, sys, time
import psycopg2, psycopg2.extensions

printer = sys.argv[1]

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]

def lags_of(text, now):
    return [now - float(line) for line in text.splitlines() if line]

# 1. mesh: LISTEN, read what is new at each notification
conn = psycopg2.connect("")
conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
cur = conn.cursor()
cur.execute("SELECT mesh_exec_start('bench-bg', ARRAY['sh', '-c', %s])", (printer,))
exec_id = cur.fetchone()[0]
cur.execute("SELECT mesh_exec_channel(%s)", (exec_id,))
cur.execute('LISTEN "%s"' % cur.fetchone()[0])
mesh, off, status = [], 0, "running"
while status == "running":
    select.select([conn], [], [], 1.0)
    conn.poll()
    conn.notifies.clear()
    cur.execute("SELECT status, stdout, stdout_next FROM mesh_exec_output(%s, %s)", (exec_id, off))
    status, text, off = cur.fetchone()
    mesh += lags_of(text, time.time())

# 2. baseline: the same command, its stdout a pipe on the host
pipe = []
p = subprocess.Popen(["sh", "-c", printer], stdout=subprocess.PIPE, bufsize=0)
buf = b""
while True:
    chunk = p.stdout.read1(65536) if hasattr(p.stdout, "read1") else p.stdout.read(65536)
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    now = time.time()
    pipe += [now - float(l) for l in lines if l]
p.wait()

ms = lambda x: round(x * 1000, 2)
print("first byte, background command -> client (%d lines, 100 ms apart)" % len(mesh))
print("  mesh (LISTEN + mesh_exec_output):  p50 %s ms  p99 %s ms" % (ms(pct(mesh, 50)), ms(pct(mesh, 99))))
print("  local pipe (baseline):             p50 %s ms  p99 %s ms" % (ms(pct(pipe, 50)), ms(pct(pipe, 99))))
print("  mesh - pipe:                        p50 +%s ms  p99 +%s ms" %
      (ms(pct(mesh, 50) - pct(pipe, 50)), ms(pct(mesh, 99) - pct(pipe, 99))))
print("  ratio mesh / pipe:                  p50 %sx" % round(pct(mesh, 50) / max(pct(pipe, 50), 1e-6), 1))
EOF
