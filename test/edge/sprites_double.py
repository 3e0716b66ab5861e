#!/usr/bin/env python3
"""sprites_double.py: a TEST DOUBLE of the Fly.io Sprites API (api.sprites.dev/v1), for the
"edge" driver's tests (src/backends/edge*.c).  Not Fly.io's code and not a complete Sprites.

Followed (the vendor's published API reference, read through the `search` tool):
  * https://docs.sprites.dev/api/dev-latest - base URL, "Authorization: Bearer <token>" on
    every request, the API categories (sprites, checkpoints, exec, filesystem, ...).
  * https://sprites.dev/api/sprites - POST /v1/sprites {"name", "wait_for_capacity",
    "url_settings"} answers 201 with {id, name, organization, url, url_settings, status
    ("cold"|"warm"|"running"), created_at, updated_at}; 400 invalid parameters, 401 missing
    or invalid authentication; GET /v1/sprites lists the org's sprites (name prefix filter).
  * https://sprites.dev/api/sprites/exec - exec takes repeated "cmd" query parameters
    (command + args) and repeated "env" KEY=VALUE (which replace the default environment);
    the CLI's -dir sets the working directory.  The reference documents exec over WebSocket
    with a multiplexed stream; a non-TTY HTTP POST /v1/sprites/{name}/exec exists (used by
    third-party integrations) but its answer body is not specified.
  * Filesystem: GET /v1/sprites/{name}/fs/read?path=..., PUT /v1/sprites/{name}/fs/write?path=...
    with the file as application/octet-stream.
  * Sprites sleep on their own when idle (filesystem kept, processes stopped) and wake on
    any request; destroying one deletes its state for good.
Where the reference is silent, this double chooses plainly (and the driver follows):
  * error bodies: {"error": {"code": "...", "message": "..."}}; 404 not_found for an unknown
    sprite, 409 already_exists for a name taken, 204 for a delete;
  * exec over HTTP POST: the request body is stdin; "dir" sets the working directory;
    the same parameters may come as a JSON body {"cmd": [...], "env": ["K=V"], "dir",
    "stdin_b64", ...} (what the driver sends: env values may be secrets, never in a URL);
    "timeout_ms", "max_output_bytes" and "exec_key" bound and name the command; the answer is
    the JSON document of the sprite's in-VM agent (here mesh-sandboxd's exec answer:
    exit_code, stdout/stderr, totals, timed_out ...); POST .../exec/{exec_key}/kill signals it;
  * fs/write takes "mode" (octal permission bits as a decimal number, as mesh-sandboxd does);
  * GET /v1/sprites answers {"sprites": [...], "has_more": false}.
No TLS (loopback only); checkpoints, services, policy and proxy are not served (501).

Each sprite is a real bubblewrap workspace of one real mesh-sandboxd this double starts: exec,
files, sleep (the daemon's hibernate: processes stopped, files kept) and wake (acquire again)
are real.  Timing knobs (POST /_double/knobs, no auth: test control only): create_delay_ms
(cold create), wake_delay_ms (a cold sprite's first request), idle_sleep_ms (a sprite with no
request in flight for this long goes to sleep; 0 never).  POST /_double/sleep/{name} puts one
to sleep at once.  Never logs headers (they carry the token).
"""
import argparse
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
LOCK = threading.Lock()
SPRITES = {}       # name -> {"doc": {...}, "busy": int, "last": float, "cond": Condition}
KNOBS = {"create_delay_ms": 0, "wake_delay_ms": 0, "idle_sleep_ms": 0}
ARGS = None
DAEMON = {}


class Fail(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def now_text():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def daemon(method, path, body=None, headers=None, timeout=600):
    """One request to the backing mesh-sandboxd; (status, bytes, content type)."""
    h = {"Authorization": f"Bearer {DAEMON['token']}"}
    h.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", DAEMON["port"], timeout=timeout)
    try:
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.read(), r.getheader("Content-Type") or "application/json"
    finally:
        conn.close()


def acquire_body():
    return json.dumps({"size": "standard", "labels": {"sprites.double": "1"}, "network": "none"})


def go_to_sleep(name):
    """Sleep: the daemon hibernates the workspace (processes stopped, files kept)."""
    s = SPRITES.get(name)
    if s is None or s["doc"]["status"] == "cold":
        return
    daemon("DELETE", f"/v1/workspaces/{name}", json.dumps({"prefer": "hibernate"}),
           {"Content-Type": "application/json"})
    s["doc"]["status"] = "cold"
    s["doc"]["updated_at"] = now_text()
    s["sleeps"] += 1


def begin_use(name):
    """A request to a sprite: wake it when cold (after the wake delay), mark it busy."""
    with LOCK:
        s = SPRITES.get(name)
        if s is None:
            raise Fail(404, "not_found", f"sprite {name} not found")
        s["busy"] += 1
        cold = s["doc"]["status"] == "cold"
        if cold:
            time.sleep(KNOBS["wake_delay_ms"] / 1000.0)
            st, body, _ = daemon("PUT", f"/v1/workspaces/{name}", acquire_body(),
                                 {"Content-Type": "application/json"})
            if st >= 300:
                s["busy"] -= 1
                raise Fail(503, "wake_failed", "the sprite could not wake")
            s["wakes"] += 1
        s["doc"]["status"] = "running"
        return s


def end_use(s):
    with LOCK:
        s["busy"] -= 1
        s["last"] = time.monotonic()
        s["doc"]["status"] = "warm" if s["doc"]["status"] == "running" and s["busy"] == 0 else s["doc"]["status"]


def idle_loop():
    while True:
        time.sleep(0.05)
        limit = KNOBS["idle_sleep_ms"] / 1000.0
        if limit <= 0:
            continue
        with LOCK:
            for name, s in list(SPRITES.items()):
                if s is not None and s["busy"] == 0 and s["doc"]["status"] != "cold" and time.monotonic() - s["last"] > limit:
                    go_to_sleep(name)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):   # never the headers: they carry the token
        pass

    def send(self, status, body=b"", ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(0 if status == 204 else len(body)))
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def do_PUT(self):
        self.handle_any()

    def do_DELETE(self):
        self.handle_any()

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        raw = self.body()
        try:
            if url.path.startswith("/_double/"):
                return self.control(url.path, raw)
            if self.headers.get("Authorization", "") != f"Bearer {ARGS.token}":
                raise Fail(401, "unauthorized", "missing or invalid authentication")
            self.route(url.path, query, raw)
        except Fail as f:
            self.send(f.status, {"error": {"code": f.code, "message": f.message}})
        except (OSError, http.client.HTTPException):
            self.send(502, {"error": {"code": "sprite_unreachable", "message": "the sprite did not answer"}})

    def control(self, path, raw):
        if path == "/_double/knobs":
            KNOBS.update({k: int(v) for k, v in json.loads(raw or b"{}").items() if k in KNOBS})
            return self.send(200, KNOBS)
        m = re.match(r"^/_double/sleep/([^/]+)$", path)
        if m:
            with LOCK:
                go_to_sleep(m.group(1))
            return self.send(200, {"ok": True})
        m = re.match(r"^/_double/stats/([^/]+)$", path)
        if m and m.group(1) in SPRITES:
            s = SPRITES[m.group(1)]
            return self.send(200, {"status": s["doc"]["status"], "sleeps": s["sleeps"], "wakes": s["wakes"]})
        raise Fail(404, "not_found", "no such control")

    def route(self, path, query, raw):
        m = re.match(r"^/v1/sprites/?$", path)
        if m and self.command == "POST":
            return self.create(raw)
        if m and self.command == "GET":
            prefix = (query.get("prefix") or [""])[0]
            with LOCK:
                docs = [s["doc"] for n, s in sorted(SPRITES.items()) if s is not None and n.startswith(prefix)]
            return self.send(200, {"sprites": docs, "has_more": False, "next_continuation_token": None})
        m = re.match(r"^/v1/sprites/([^/]+)(/.*)?$", path)
        if not m:
            raise Fail(404, "not_found", "no such route")
        name, rest = m.group(1), m.group(2) or ""
        if rest == "" and self.command == "GET":
            with LOCK:
                s = SPRITES.get(name)
                if s is None:
                    raise Fail(404, "not_found", f"sprite {name} not found")
                return self.send(200, s["doc"])
        if rest == "" and self.command == "DELETE":
            return self.delete(name)
        if rest == "/exec" and self.command == "POST":
            return self.exec(name, query, raw)
        km = re.match(r"^/exec/([^/]+)/kill$", rest)
        if km and self.command == "POST":
            return self.use(name, "POST", f"/v1/workspaces/{name}/execs/{urllib.parse.quote(km.group(1), safe='')}/kill",
                            raw, {"Content-Type": "application/json"})
        if rest == "/fs/read" and self.command == "GET":
            p = urllib.parse.quote((query.get("path") or [""])[0], safe="")
            return self.use(name, "GET", f"/v1/workspaces/{name}/files?path={p}", None, {})
        if rest == "/fs/write" and self.command == "PUT":
            p = urllib.parse.quote((query.get("path") or [""])[0], safe="")
            mode = int((query.get("mode") or ["420"])[0])
            return self.use(name, "PUT", f"/v1/workspaces/{name}/files?path={p}&mode={mode}", raw,
                            {"Content-Type": "application/octet-stream"})
        if rest.startswith("/checkpoint") or rest.startswith("/services") or rest.startswith("/policy"):
            raise Fail(501, "not_implemented", "this double does not serve " + rest.lstrip("/"))
        raise Fail(404, "not_found", "no such route")

    def create(self, raw):
        try:
            doc = json.loads(raw or b"")
        except ValueError:
            raise Fail(400, "invalid_request", "the body is not JSON")
        name = doc.get("name") if isinstance(doc, dict) else None
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise Fail(400, "invalid_request", "name must be 1-63 lowercase letters, digits and '-'")
        with LOCK:
            if name in SPRITES:
                raise Fail(409, "already_exists", f"sprite {name} already exists")
            SPRITES[name] = None   # reserved while it is created
        time.sleep(KNOBS["create_delay_ms"] / 1000.0)
        st, body, _ = daemon("PUT", f"/v1/workspaces/{name}", acquire_body(), {"Content-Type": "application/json"})
        if st >= 300:
            with LOCK:
                del SPRITES[name]
            raise Fail(503, "no_capacity", "no capacity for a new sprite")
        t = now_text()
        sprite = {"id": str(uuid.uuid4()), "name": name, "organization": "double-org",
                  "url": f"http://{name}.sprites.invalid", "url_settings": {"auth": "sprite"},
                  "status": "warm", "created_at": t, "updated_at": t}
        with LOCK:
            SPRITES[name] = {"doc": sprite, "busy": 0, "last": time.monotonic(), "sleeps": 0, "wakes": 0}
        self.send(201, sprite)

    def delete(self, name):
        with LOCK:
            s = SPRITES.get(name)
            if s is None:
                raise Fail(404, "not_found", f"sprite {name} not found")
            daemon("DELETE", f"/v1/workspaces/{name}")
            del SPRITES[name]
        self.send(204)

    def exec(self, name, query, raw):
        if (self.headers.get("Content-Type") or "").startswith("application/json"):
            return self.exec_json(name, raw)
        cmd = query.get("cmd") or []
        if not cmd:
            raise Fail(400, "invalid_request", "cmd is required")
        body = {"argv": cmd, "output": "tail"}
        env = {}
        for kv in query.get("env") or []:
            k, sep, v = kv.partition("=")
            if not sep or not k:
                raise Fail(400, "invalid_request", "env takes KEY=VALUE")
            env[k] = v
        if env:
            body["env"] = env
        for q, field in (("dir", "dir"), ("exec_key", "exec_key")):
            if query.get(q):
                body[field] = query[q][0]
        for q in ("timeout_ms", "max_output_bytes"):
            if query.get(q):
                body[q] = int(query[q][0])
        if raw:
            import base64
            body["stdin_b64"] = base64.b64encode(raw).decode()
        self.use(name, "POST", f"/v1/workspaces/{name}/exec", json.dumps(body).encode(),
                 {"Content-Type": "application/json"})

    def exec_json(self, name, raw):
        """The same parameters as a JSON body (env values may be secrets: never in a URL)."""
        try:
            doc = json.loads(raw)
        except ValueError:
            raise Fail(400, "invalid_request", "the body is not JSON")
        cmd = doc.get("cmd") if isinstance(doc, dict) else None
        if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
            raise Fail(400, "invalid_request", "cmd is required: an array of strings")
        body = {"argv": cmd, "output": "tail"}
        env = {}
        for kv in doc.get("env") or []:
            k, sep, v = str(kv).partition("=")
            if not sep or not k:
                raise Fail(400, "invalid_request", "env takes KEY=VALUE")
            env[k] = v
        if env:
            body["env"] = env
        for field in ("dir", "exec_key", "timeout_ms", "max_output_bytes", "stdin_b64"):
            if doc.get(field) is not None:
                body[field] = doc[field]
        self.use(name, "POST", f"/v1/workspaces/{name}/exec", json.dumps(body).encode(),
                 {"Content-Type": "application/json"})

    def use(self, name, method, dpath, body, headers):
        """Forward one request into the sprite (waking it first), answer what it said."""
        s = begin_use(name)
        try:
            st, data, ctype = daemon(method, dpath, body, headers)
        finally:
            end_use(s)
        self.send(st, data, ctype)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--work", required=True)
    ARGS = ap.parse_args()
    ARGS.token = open(ARGS.token_file).read().strip()
    state = os.path.join(ARGS.work, "sandboxd")
    os.makedirs(state, exist_ok=True)
    DAEMON["token"] = secrets.token_hex(16)
    tok = os.path.join(ARGS.work, "daemon.token")
    with open(os.open(tok, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(DAEMON["token"] + "\n")
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        DAEMON["port"] = so.getsockname()[1]
    read_end, write_end = os.pipe()
    log = open(os.path.join(ARGS.work, "sandboxd.log"), "ab")
    proc = subprocess.Popen([ARGS.daemon, "--state-dir", state, "--listen", f"127.0.0.1:{DAEMON['port']}",
                             "--token-file", tok, "--cgroup-name", f"mesh-spritesdouble-{os.getpid()}",
                             "--ready-fd", str(write_end)], stdout=log, stderr=log, pass_fds=(write_end,),
                            start_new_session=True)
    os.close(write_end)
    os.read(read_end, 16)   # the daemon writes when it serves (or closes the pipe when it dies)
    if proc.poll() is not None:
        raise SystemExit("mesh-sandboxd did not start (see sandboxd.log)")

    def shutdown(*_):
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os._exit(0)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    threading.Thread(target=idle_loop, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
