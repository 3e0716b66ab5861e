#!/usr/bin/env python3
"""scale.py - many live workspaces at once: create COUNT, use the first and the last, release
them all, timing each create against how many were live when it started.

Usage: scale.py (--socket PATH | --url URL --token TOKEN) COUNT CLIENTS [NETWORK]

Prints one JSON line: created, released, errors (the first few), left (listed after the
releases), and the median create time in ms while the first and the last tenth were made.
"""
import base64
import http.client
import json
import socket
import statistics
import sys
import threading
import time
import urllib.parse


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket (the embedded daemon's listener)."""

    def __init__(self, path):
        super().__init__("sd", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.path)


args = sys.argv[1:]
if args[0] == "--socket":
    target, token, args = args[1], None, args[2:]
else:
    target, token, args = urllib.parse.urlparse(args[1]), args[3], args[4:]
COUNT, CLIENTS = int(args[0]), int(args[1])
NETWORK = args[2] if len(args) > 2 else "none"
lock = threading.Lock()
result = {"created": 0, "released": 0, "errors": 0, "first_errors": []}
create_ms = [None] * COUNT


def connect():
    if token is None:
        return UnixConnection(target)
    return http.client.HTTPConnection(target.hostname, target.port, timeout=120)


def call(conn, method, path, body=None):
    headers = {"Authorization": "Bearer " + token} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw


def error(what):
    with lock:
        result["errors"] += 1
        if len(result["first_errors"]) < 5:
            result["first_errors"].append(what)


def worker(indexes, phase):
    conn = connect()
    for i in indexes:
        ws = "sc-%d" % i
        try:
            if phase == "create":
                start = time.monotonic()
                st, r = call(conn, "PUT", "/v1/workspaces/" + ws, {"network": NETWORK})
                create_ms[i] = (time.monotonic() - start) * 1000
                ok = st == 200 and r.get("id") == ws and r.get("created") is True
            else:
                st, r = call(conn, "DELETE", "/v1/workspaces/" + ws)
                ok = st == 200 and r == {"id": ws, "outcome": "destroyed"}
            if ok:
                with lock:
                    result["created" if phase == "create" else "released"] += 1
            else:
                error("%s %s: %s %s" % (phase, ws, st, str(r)[:200]))
        except (OSError, http.client.HTTPException) as e:
            error("%s %s: %s" % (phase, ws, e))
            conn.close()
            conn = connect()
    conn.close()


def run(phase):
    threads = [threading.Thread(target=worker, args=(range(c, COUNT, CLIENTS), phase))
               for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


run("create")
conn = connect()
st, r = call(conn, "GET", "/v1/workspaces")
result["listed"] = len(r.get("workspaces", [])) if st == 200 else -1
for i in (0, COUNT - 1):   # the oldest and the newest still work
    st, r = call(conn, "POST", "/v1/workspaces/sc-%d/exec" % i, {"argv": ["echo", "sc-%d" % i]})
    out = base64.b64decode(r.get("stdout_b64", "")) if st == 200 else b""
    if out != ("sc-%d\n" % i).encode():
        error("exec in sc-%d: %s %s" % (i, st, str(r)[:200]))
run("release")
st, r = call(conn, "GET", "/v1/workspaces")
result["left"] = len(r.get("workspaces", [])) if st == 200 else -1
tenth = max(1, COUNT // 10)
done = [m for m in create_ms if m is not None]
if len(done) == COUNT:
    result["create_ms_first_tenth"] = round(statistics.median(create_ms[:tenth]), 1)
    result["create_ms_last_tenth"] = round(statistics.median(create_ms[-tenth:]), 1)
print(json.dumps(result))
