#!/usr/bin/python3
"""test/lib/turns.py: harness turns through a real driver (psycopg2), one thread
and one connection per client, as a harness fleet would call mesh_exec.

    turns.py CLIENTS SECONDS [AGENT]

Each turn acquires a fresh run, writes a file, runs three commands, reads the
file back and releases the run; every answer is checked against what this
turn sent (a nonce), so an answer that belongs to another request is counted.
Connection settings come from the PG* environment.  Prints one JSON object:
turns, turns per second, errors (the first few), and per call kind the
p50/p99 latency in milliseconds as the client saw it.  Exits non-zero on any
error or wrong answer.
"""
import json
import sys
import threading
import time
import uuid

import psycopg2


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100.0 * len(ordered)))], 3)


class Client(threading.Thread):
    def __init__(self, agent, deadline):
        super().__init__(daemon=True)
        self.agent = agent
        self.deadline = deadline
        self.turns = 0
        self.errors = []
        self.latency = {}

    def call(self, cur, kind, sql, args):
        t0 = time.perf_counter()
        cur.execute(sql, args)
        row = cur.fetchone()
        self.latency.setdefault(kind, []).append((time.perf_counter() - t0) * 1000.0)
        return row

    def expect(self, what, got, want):
        if got != want:
            raise AssertionError("%s answered %r, expected %r" % (what, got, want))

    def turn(self, cur):
        run = "py-" + str(uuid.uuid4())
        nonce = uuid.uuid4().hex
        self.call(cur, "acquire", "SELECT run_id FROM mesh_acquire(%s, %s, 'psycopg2')", (run, self.agent))
        self.call(cur, "write", "SELECT mesh_write_file(%s, 'turn.txt', convert_to(%s, 'UTF8'))", (run, nonce))
        row = self.call(cur, "exec", "SELECT stdout, status FROM mesh_exec(%s, ARRAY['sh', '-c', 'echo \"$1\"', 'sh', %s])",
                        (run, nonce))
        self.expect("exec echo", row, (nonce + "\n", "ok"))
        row = self.call(cur, "exec", "SELECT stdout, status FROM mesh_exec(%s, ARRAY['cat', 'turn.txt'])", (run,))
        self.expect("exec cat", row, (nonce, "ok"))
        row = self.call(cur, "exec", "SELECT stdout, status FROM mesh_exec(%s, ARRAY['sh', '-c', 'echo \"$RUN\"'], env => %s::jsonb)",
                        (run, json.dumps({"RUN": run})))
        self.expect("exec env", row, (run + "\n", "ok"))
        row = self.call(cur, "read", "SELECT convert_from(mesh_read_file(%s, 'turn.txt'), 'UTF8')", (run,))
        self.expect("read back", row[0], nonce)
        row = self.call(cur, "release", "SELECT mesh_release(%s)", (run,))
        self.expect("release", row[0], "destroyed")

    def run(self):
        try:
            conn = psycopg2.connect("")
            conn.autocommit = True
            cur = conn.cursor()
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            self.errors.append("connect: %s" % e)
            return
        while time.monotonic() < self.deadline:
            try:
                self.turn(cur)
                self.turns += 1
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                self.errors.append(str(e).strip().splitlines()[0] if str(e).strip() else repr(e))
        conn.close()


def main():
    clients = int(sys.argv[1])
    seconds = float(sys.argv[2])
    agent = sys.argv[3] if len(sys.argv) > 3 else "load"
    started = time.monotonic()
    threads = [Client(agent, started + seconds) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    elapsed = time.monotonic() - started
    latency = {}
    for t in threads:
        for kind, values in t.latency.items():
            latency.setdefault(kind, []).extend(values)
    errors = [e for t in threads for e in t.errors]
    turns = sum(t.turns for t in threads)
    print(json.dumps({
        "clients": clients,
        "turns": turns,
        "turns_per_s": round(turns / elapsed, 2),
        "errors": len(errors) + sum(1 for t in threads if t.is_alive()),
        "first_errors": errors[:5],
        "latency_ms": {k: {"p50": percentile(v, 50), "p99": percentile(v, 99), "n": len(v)}
                       for k, v in sorted(latency.items())},
    }))
    return 0 if turns > 0 and not errors and not any(t.is_alive() for t in threads) else 1


if __name__ == "__main__":
    sys.exit(main())
