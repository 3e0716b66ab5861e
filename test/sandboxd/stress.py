#!/usr/bin/env python3
"""stress.py - many concurrent clients, each on its own workspaces, checking that every answer
belongs to its own request.

Usage: stress.py URL TOKEN CLIENTS SECONDS [NETWORK [shared]]

Each client thread keeps one HTTP/1.1 keep-alive connection (as the extension's workers do)
and repeats a turn until SECONDS have passed: create a workspace with a fresh nonce as label,
write the nonce to a file, exec twice (argv echo and a shell that reads the file), read the
file back, describe the workspace and ask to kill an exec that does not run (BURST times each,
back to back: cheap calls are where routing races show), release it. Every response is checked against what this
request asked: the workspace id, the nonce, the path, the byte count, the outcome. Prints one
JSON summary line: turns, calls, errors (the first few, in full).

With "shared", all clients race on ONE workspace instead (acquire, exec, release in a loop):
each answer must be one a lone client could also get (created or not, 409/404 while it is
released under it), never a 5xx, and an exec that ran must echo its own nonce.
"""
import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

URL, TOKEN, CLIENTS, SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
NETWORK = sys.argv[5] if len(sys.argv) > 5 else "none"
SHARED = len(sys.argv) > 6 and sys.argv[6] == "shared"
parsed = urllib.parse.urlparse(URL)
BURST = 10
lock = threading.Lock()
totals = {"turns": 0, "calls": 0, "errors": 0, "first_errors": []}


class Mismatch(Exception):
    pass


def call(conn, method, path, body=None, raw=False):
    """One request on the client's own connection; returns (status, parsed body)."""
    headers = {"Authorization": "Bearer " + TOKEN}
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    with lock:
        totals["calls"] += 1
    if raw and resp.status == 200:
        return resp.status, data
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data


def expect(cond, what, got):
    if not cond:
        raise Mismatch("%s: got %r" % (what, got))


def turn(conn, client, n):
    """One harness turn on workspace st-CLIENT-N; raises Mismatch on any foreign answer."""
    ws = "st-%d-%d" % (client, n)
    nonce = "%s-%s" % (ws, os.urandom(8).hex())
    base = "/v1/workspaces/" + ws
    st, r = call(conn, "PUT", base, {"size": "small", "network": NETWORK,
                                      "labels": {"nonce": nonce}})
    expect(st == 200 and r.get("id") == ws and r.get("created") is True
           and r.get("labels", {}).get("nonce") == nonce, "acquire " + ws, (st, r))
    st, r = call(conn, "PUT", base + "/files?path=nonce.txt", nonce.encode())
    expect(st == 200 and r.get("path") == "/workspace/nonce.txt" and r.get("bytes") == len(nonce),
           "write " + ws, (st, r))
    st, r = call(conn, "POST", base + "/exec", {"argv": ["echo", nonce], "exec_key": n})
    out = base64.b64decode(r.get("stdout_b64", "")) if st == 200 else b""
    expect(st == 200 and r.get("exit_code") == 0 and out == (nonce + "\n").encode(),
           "exec echo " + ws, (st, r))
    st, r = call(conn, "POST", base + "/exec",
                 {"argv": ["sh", "-c", 'test "$(cat nonce.txt)" = "$N" && printf %s "$N"'],
                  "env": {"N": nonce}})
    out = base64.b64decode(r.get("stdout_b64", "")) if st == 200 else b""
    expect(st == 200 and r.get("exit_code") == 0 and out == nonce.encode(),
           "exec cat " + ws, (st, r))
    st, r = call(conn, "GET", base + "/files?path=nonce.txt", raw=True)
    expect(st == 200 and r == nonce.encode(), "read " + ws, (st, r))
    # ".." resolution races with every mount on the host (other workspaces starting)
    st, r = call(conn, "GET", base + "/files?path=/workspace/../workspace/nonce.txt", raw=True)
    expect(st == 200 and r == nonce.encode(), "read through .. " + ws, (st, r))
    for _ in range(BURST):   # cheap calls back to back: routing races show up here
        st, r = call(conn, "GET", base)
        expect(st == 200 and r.get("id") == ws and r.get("labels", {}).get("nonce") == nonce,
               "describe " + ws, (st, r))
        st, r = call(conn, "POST", base + "/execs/" + nonce + "/kill")
        expect(st == 404 and r.get("error", {}).get("code") == "exec_not_found",
               "kill of no exec " + ws, (st, r))
    st, r = call(conn, "DELETE", base, {"prefer": "destroy"})
    expect(st == 200 and r == {"id": ws, "outcome": "destroyed"}, "release " + ws, (st, r))


def shared_turn(conn, client, n):
    """One acquire, exec, release on the workspace every client uses."""
    ws, base = "st-shared", "/v1/workspaces/st-shared"
    nonce = "%d-%d-%s" % (client, n, os.urandom(4).hex())
    st, r = call(conn, "PUT", base, {"network": NETWORK})
    expect(st == 200 and r.get("id") == ws, "shared acquire", (st, r))
    st, r = call(conn, "POST", base + "/exec", {"argv": ["echo", nonce]})
    if st == 200:
        expect(base64.b64decode(r.get("stdout_b64", "")) == (nonce + "\n").encode()
               or r.get("killed") is True, "shared exec", (st, r))
    else:
        expect(st in (404, 409), "shared exec", (st, r))
    st, r = call(conn, "DELETE", base)
    expect((st == 200 and r == {"id": ws, "outcome": "destroyed"})
           or (st == 404 and r.get("error", {}).get("code") == "workspace_not_found"),
           "shared release", (st, r))


def client(i, deadline):
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    n = 0
    while time.monotonic() < deadline:
        try:
            (shared_turn if SHARED else turn)(conn, i, n)
            with lock:
                totals["turns"] += 1
        except (Mismatch, OSError, http.client.HTTPException) as e:
            with lock:
                totals["errors"] += 1
                if len(totals["first_errors"]) < 5:
                    totals["first_errors"].append("client %d: %s" % (i, e))
            conn.close()
            conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
        n += 1
    conn.close()


deadline = time.monotonic() + SECONDS
threads = [threading.Thread(target=client, args=(i, deadline)) for i in range(CLIENTS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(totals))
