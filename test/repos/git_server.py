#!/usr/bin/env python3
"""git_server.py - a git smart-HTTP server for tests: real `git http-backend` behind http.server.

Every request must carry Basic auth (user:token, as git sends what a credential helper
answered); the token is checked on EVERY request with the provider's API double whose URL is
given (test/repos/github_double.py, where the user is x-access-token, or
test/repos/gitlab_double.py, where it must be oauth2; POST /_double/check with git's
Authorization header, never in a URL), which honours the repository the token was minted for,
its expiry and its revocation.  Without auth the answer is 401 with a Basic challenge (git then asks its
credential helper); a token the double refuses gets 401 too (403 for another repository).
The repository is the first two path segments (owner/name.git under ROOT).

The listening socket can be made inside another process's network namespace (NETNS_PID: a
sandbox's, so that git inside it reaches the server on its own 127.0.0.1 without egress through
the host), while everything else, the double included, stays in this process's namespace.
The log (one line per request: method, path, status) never holds a credential.

Usage: git_server.py PORTFILE PORT ROOT DOUBLE_URL LOGFILE [NETNS_PID]
(PORT 0: any free port; the port is written to PORTFILE once the server listens.)
"""
import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTFILE, PORT, ROOT, DOUBLE, LOGFILE = sys.argv[1:6]
NETNS_PID = sys.argv[6] if len(sys.argv) > 6 else None
CLONE_NEWNET = 0x40000000
log_lock = threading.Lock()


def log(line):
    with log_lock, open(LOGFILE, "a") as f:
        f.write(line + "\n")


def token_valid(auth, repository, access):
    """The double's verdict on AUTH for REPOSITORY: 200, 401 or 403."""
    req = urllib.request.Request(DOUBLE + "/_double/check", method="POST",
                                 data=json.dumps({"repository": repository, "access": access}).encode(),
                                 headers={"Authorization": auth, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def refuse(self, code, why):
        body = (why + "\n").encode()
        self.send_response(code)
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        log(f"{self.command} {self.path.split('?')[0]} {code}")

    def request_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                n = int(self.rfile.readline().strip(), 16)
                if n == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(n)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def serve(self):
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")
        body = self.request_body() if self.command == "POST" else b""
        if len(parts) < 3 or not parts[1].endswith(".git"):
            return self.refuse(404, "not a repository path")
        repository = parts[0] + "/" + parts[1][:-len(".git")]
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return self.refuse(401, "authentication required")
        write = "git-receive-pack" in path or "service=git-receive-pack" in query
        verdict = token_valid(auth, repository, "write" if write else "read")
        if verdict != 200:
            return self.refuse(403 if verdict == 403 else 401, "the token does not open this repository")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": ROOT,
               "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "GIT_HTTP_MAX_REQUEST_BUFFER": "100M"}
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        log(f"{self.command} {path} {status} {len(payload)}")

    do_GET = serve
    do_POST = serve


def listening_socket():
    """A TCP socket on 127.0.0.1:PORT in NETNS_PID's network namespace (or ours)."""
    if NETNS_PID is None:
        s = socket.socket()
        s.bind(("127.0.0.1", int(PORT)))
        return s
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    theirs = os.open(f"/proc/{NETNS_PID}/ns/net", os.O_RDONLY)
    if libc.setns(theirs, CLONE_NEWNET) != 0:
        sys.exit("setns: " + os.strerror(ctypes.get_errno()))
    try:
        s = socket.socket()
        s.bind(("127.0.0.1", int(PORT)))
    finally:
        if libc.setns(own, CLONE_NEWNET) != 0:
            sys.exit("setns back: " + os.strerror(ctypes.get_errno()))
        os.close(own)
        os.close(theirs)
    return s


sock = listening_socket()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
server.socket.close()
server.socket = sock
server.server_address = sock.getsockname()
server.server_activate()
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
