#!/usr/bin/env python3
"""gitlab_double.py - a TEST DOUBLE of the GitLab REST API's project access token endpoints.

Built from GitLab's published REST documentation ("Project access tokens API", "REST API
authentication", "Status codes"), not from GitLab's code:
  * Authentication: the PRIVATE-TOKEN header; a missing or unknown token is 401
    {"message": "401 Unauthorized"}.  Here the one install token (read from a file) is a
    Maintainer (40) of the projects given on the command line.
  * "Create a project access token": POST /api/v4/projects/{id}/access_tokens, {id} the
    project's URL-encoded path (group%2Fname) or a number; body {"name", "scopes",
    "access_level", "expires_at" (YYYY-MM-DD)}.  A project the install token cannot see is
    404 {"message": "404 Project Not Found"}; a missing name or scopes 400
    {"error": "name is missing"}; an unknown scope, an access level GitLab does not have or
    above the caller's own, an expiry that is not a date, not after today or more than 365
    days on are 400 {"message": ...}.  201 {"id", "name", "revoked", "created_at", "scopes",
    "user_id", "active", "expires_at", "access_level", "token"}.  A token expires at the start
    (UTC) of its expires_at day.
  * "Revoke a project access token": DELETE /api/v4/projects/{id}/access_tokens/{token_id},
    PRIVATE-TOKEN; 204, then the token is refused.  A token id the project has no active
    token of is 404 {"message": "404 Not Found"} (a simplification: GitLab may answer 400 for
    a token already revoked).
  * git over HTTP takes a project access token as the password of any user name; our broker
    sends "oauth2", and this double insists on it, to test that it does.
For the test's git server (test/repos/git_server.py) it also answers, under /_double/,
whether a token may read or write a project (the token in a header, never the URL), lets the
test expire a token (by its SHA-256), counts mints and revocations, and lists the paths it was
asked (to show that no credential ever was in one).

Usage: gitlab_double.py PORTFILE INSTALL_TOKEN_FILE GROUP/NAME[,GROUP/NAME...]
"""
import base64
import datetime
import hashlib
import secrets
import sys
import threading
import time
import urllib.parse

from json_double import JsonHandler, serve

PORTFILE, INSTALL_TOKEN_FILE, PROJECTS = sys.argv[1:4]
with open(INSTALL_TOKEN_FILE) as f:
    INSTALL_TOKEN = f.read().strip()
PROJECT_IDS = {p: i + 1000 for i, p in enumerate(PROJECTS.split(","))}
CALLER_LEVEL = 40                    # the install token's role in its projects: Maintainer
ACCESS_LEVELS = {10, 20, 30, 40, 50}  # Guest, Reporter, Developer, Maintainer, Owner
SCOPES = {"api", "read_api", "read_repository", "write_repository", "read_registry",
          "write_registry", "create_runner", "manage_runner", "ai_features", "k8s_proxy",
          "self_rotate"}
PREFIX = "/api/v4/projects/"

lock = threading.Lock()
tokens = {}      # token -> {"id", "project", "scopes", "access_level", "expires": t, "revoked"}
counters = {"mints": 0, "revokes": 0, "unauthorized": 0}
paths = []
next_id = [1]


def live(tok):
    t = tokens.get(tok)
    return t if t and not t["revoked"] and t["expires"] > time.time() else None


def basic(auth):
    """(user, password) of a Basic Authorization header, or (None, None)."""
    if not auth.startswith("Basic "):
        return None, None
    try:
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
    except Exception:
        return None, None
    return user, password


class Handler(JsonHandler):
    def project(self):
        """(project path, rest of the path) of /api/v4/projects/{id}/..., or (None, None)."""
        if not self.path.startswith(PREFIX):
            return None, None
        ident, _, rest = self.path[len(PREFIX):].partition("/")
        ident = urllib.parse.unquote(ident)
        by_id = {str(v): k for k, v in PROJECT_IDS.items()}
        return (ident if ident in PROJECT_IDS else by_id.get(ident)), rest

    def authenticated(self):
        with lock:
            paths.append(self.path)
        if self.headers.get("PRIVATE-TOKEN", "") != INSTALL_TOKEN:
            with lock:
                counters["unauthorized"] += 1
            self.reply(401, {"message": "401 Unauthorized"})
            return False
        return True

    def create(self, project):
        req = self.body()
        if not isinstance(req, dict):
            return self.reply(400, {"message": "400 Bad request - the body is not JSON"})
        for field in ("name", "scopes"):
            if not req.get(field):
                return self.reply(400, {"error": f"{field} is missing"})
        scopes = req["scopes"]
        if not isinstance(scopes, list) or any(s not in SCOPES for s in scopes):
            return self.reply(400, {"message": {"scopes": ["can only contain available scopes"]}})
        level = req.get("access_level", 40)
        if level not in ACCESS_LEVELS:
            return self.reply(400, {"error": "access_level does not have a valid value"})
        if level > CALLER_LEVEL:
            return self.reply(400, {"message": "400 Bad request - Not allowed to create a token with an access level above your own"})
        try:
            expires = datetime.date.fromisoformat(req.get("expires_at") or "")
        except (TypeError, ValueError):
            return self.reply(400, {"error": "expires_at is invalid"})
        today = datetime.datetime.now(datetime.timezone.utc).date()
        if expires <= today or expires > today + datetime.timedelta(days=365):
            return self.reply(400, {"message": {"expires_at": ["must be after today and at most 365 days on"]}})
        tok = "glpat-" + secrets.token_urlsafe(20)
        with lock:
            tid = next_id[0]
            next_id[0] += 1
            tokens[tok] = {"id": tid, "project": project, "scopes": scopes, "access_level": level,
                           "expires": datetime.datetime(expires.year, expires.month, expires.day,
                                                        tzinfo=datetime.timezone.utc).timestamp(),
                           "revoked": False}
            counters["mints"] += 1
        return self.reply(201, {"id": tid, "name": req["name"], "revoked": False,
                                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                                "description": None, "scopes": scopes, "user_id": 500 + tid,
                                "last_used_at": None, "active": True, "expires_at": expires.isoformat(),
                                "access_level": level, "token": tok})

    def check(self):
        # {"repository": "group/name", "access": "read"|"write"}, git's Basic auth in Authorization
        req = self.body() or {}
        user, password = basic(self.headers.get("Authorization", ""))
        with lock:
            t = live(password or "")
        if t is None or user != "oauth2":
            return self.reply(401, {"message": "HTTP Basic: Access denied"})
        if req.get("repository") != t["project"]:
            return self.reply(403, {"message": "not this project"})
        write = req.get("access") == "write"
        scope = "write_repository" if write else "read_repository"
        if not (scope in t["scopes"] or "api" in t["scopes"]) or (write and t["access_level"] < 30):
            return self.reply(403, {"message": "the token's scopes or access level are too low"})
        return self.reply(200, {})

    def do_POST(self):
        if self.path == "/_double/check":
            return self.check()
        if self.path == "/_double/expire":
            # {"sha256": ...}: that token's expiry passes now (the test holds no token value)
            want = (self.body() or {}).get("sha256")
            with lock:
                for k, t in tokens.items():
                    if hashlib.sha256(k.encode()).hexdigest() == want:
                        t["expires"] = time.time() - 1
            return self.reply(200, {})
        if not self.authenticated():
            return
        project, rest = self.project()
        if project is None:
            return self.reply(404, {"message": "404 Project Not Found"})
        if rest != "access_tokens":
            return self.reply(404, {"message": "404 Not Found"})
        return self.create(project)

    def do_DELETE(self):
        if not self.authenticated():
            return
        project, rest = self.project()
        if project is None:
            return self.reply(404, {"message": "404 Project Not Found"})
        parts = rest.split("/")
        if len(parts) != 2 or parts[0] != "access_tokens":
            return self.reply(404, {"message": "404 Not Found"})
        with lock:
            for k, t in tokens.items():
                if str(t["id"]) == parts[1] and t["project"] == project and live(k):
                    t["revoked"] = True
                    counters["revokes"] += 1
                    break
            else:
                return self.reply(404, {"message": "404 Not Found"})
        return self.reply(204)

    def do_GET(self):
        if self.path == "/_double/tokens":
            with lock:
                return self.reply(200, [{"sha256": hashlib.sha256(k.encode()).hexdigest(), "id": t["id"],
                                         "project": t["project"], "scopes": t["scopes"],
                                         "access_level": t["access_level"], "live": live(k) is not None}
                                        for k, t in tokens.items()])
        if self.path == "/_double/counters":
            with lock:
                return self.reply(200, dict(counters, live=sum(1 for t in tokens if live(t))))
        if self.path == "/_double/paths":
            with lock:
                return self.reply(200, list(paths))
        if not self.authenticated():
            return
        return self.reply(404, {"message": "404 Not Found"})


serve(PORTFILE, Handler)
