#!/usr/bin/env python3
"""github_double.py - a TEST DOUBLE of the GitHub REST API's installation-token endpoints.

Built from GitHub's published REST documentation, not from GitHub's code:
  * "Generating a JSON Web Token (JWT) for a GitHub App": RS256, iss = App id, iat/exp
    numeric, exp no more than 10 minutes after iat, not expired, iat not in the future.
  * "Create an installation access token for an app":
    POST /app/installations/{installation_id}/access_tokens, Authorization: Bearer <JWT>,
    body {"repositories": [names], "permissions": {name: "read"|"write"}}; 201
    {"token", "expires_at", "permissions", "repositories"}; 401 on a bad JWT, 404 on an
    unknown installation, 422 when a repository or permission is beyond the installation.
  * "Revoke an installation access token": DELETE /installation/token, Authorization:
    Bearer <installation token>; 204, then the token is refused.
For the test's git server (test/repos/git_server.py) it also answers, under /_double/,
whether a token may read or write a repository (the token in a header, never the URL),
and lets the test expire tokens (a lifetime for new ones, or one by its SHA-256), count mints and rotate the App key.

Usage: github_double.py PORTFILE APP_ID PUBLIC_KEY_PEM INSTALLATION_ID OWNER REPO[,REPO...]
"""
import base64
import hashlib
import json
import secrets
import sys
import threading
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from json_double import JsonHandler, serve

PORTFILE, APP_ID, PUBKEY_PATH, INSTALLATION, OWNER, REPOS = sys.argv[1:7]
INSTALLED_REPOS = set(REPOS.split(","))
# What the App was granted at installation: a token can ask for these or less.
INSTALLED_PERMISSIONS = {"contents": "write", "pull_requests": "write", "metadata": "read"}
LEVEL = {"read": 1, "write": 2}

lock = threading.Lock()
tokens = {}          # token -> {"repos": set("owner/name"), "permissions": {}, "expires": t, "revoked": bool}
counters = {"mints": 0, "revokes": 0, "jwt_refused": 0}
state = {"lifetime": 3600}


def load_public_key():
    with open(PUBKEY_PATH, "rb") as f:
        return serialization.load_pem_public_key(f.read())


public_key = load_public_key()


def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def jwt_problem(auth):
    """None if AUTH carries a JWT GitHub would accept for this App, else why not."""
    if not auth.startswith("Bearer "):
        return "no bearer JWT"
    parts = auth[len("Bearer "):].split(".")
    if len(parts) != 3:
        return "not a JWT"
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except Exception:
        return "undecodable JWT"
    if header.get("alg") != "RS256":
        return "alg is not RS256"
    try:
        public_key.verify(signature, (parts[0] + "." + parts[1]).encode(),
                          padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return "signature does not verify with the App's public key"
    now = int(time.time())
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int) or not isinstance(exp, int):
        return "iat/exp are not numbers"
    if str(claims.get("iss")) != APP_ID:
        return "iss is not the App id"
    if iat > now + 5:
        return "iat is in the future"
    if exp <= now:
        return "JWT expired"
    if exp - iat > 600:
        return "exp is more than 10 minutes after iat"
    return None


def token_of(auth):
    for prefix in ("Bearer ", "token "):
        if auth.startswith(prefix):
            return auth[len(prefix):]
    if auth.startswith("Basic "):
        try:
            user_pass = base64.b64decode(auth[6:]).decode()
        except Exception:
            return None
        return user_pass.split(":", 1)[1] if ":" in user_pass else None
    return None


def live(tok):
    t = tokens.get(tok)
    return t if t and not t["revoked"] and t["expires"] > time.time() else None


class Handler(JsonHandler):
    def do_POST(self):
        auth = self.headers.get("Authorization", "")
        path = self.path
        if path.startswith("/app/installations/") and path.endswith("/access_tokens"):
            problem = jwt_problem(auth)
            if problem:
                with lock:
                    counters["jwt_refused"] += 1
                return self.reply(401, {"message": "A JSON web token could not be decoded",
                                        "why": problem})
            if path.split("/")[3] != INSTALLATION:
                return self.reply(404, {"message": "Not Found"})
            req = self.body()
            names = req.get("repositories") or sorted(INSTALLED_REPOS)
            perms = req.get("permissions") or dict(INSTALLED_PERMISSIONS)
            if any(n not in INSTALLED_REPOS for n in names):
                return self.reply(422, {"message": "There is at least one repository that does not exist or is not accessible to the parent installation."})
            for k, v in perms.items():
                if k not in INSTALLED_PERMISSIONS or LEVEL.get(v, 9) > LEVEL[INSTALLED_PERMISSIONS[k]]:
                    return self.reply(422, {"message": "The permissions requested are not granted to this installation."})
            tok = "ghs_" + secrets.token_urlsafe(27)
            with lock:
                expires = time.time() + state["lifetime"]
                tokens[tok] = {"repos": {OWNER + "/" + n for n in names}, "permissions": perms,
                               "expires": expires, "revoked": False}
                counters["mints"] += 1
            return self.reply(201, {
                "token": tok,
                "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
                "permissions": perms,
                "repository_selection": "selected",
                "repositories": [{"name": n, "full_name": OWNER + "/" + n} for n in names]})
        if path == "/_double/lifetime":
            state["lifetime"] = int(self.body()["seconds"])
            return self.reply(200, {})
        if path == "/_double/rotate":
            # The App's key was rotated: the JWTs of the old key are refused, and the tokens
            # minted under it are revoked (what the install does for us at rotation).
            global public_key
            public_key = load_public_key()
            with lock:
                for t in tokens.values():
                    t["revoked"] = True
            return self.reply(200, {})
        if path == "/_double/expire":
            # {"sha256": ...}: that token's expiry passes now (the test holds no token value)
            want = self.body().get("sha256")
            with lock:
                for k, t in tokens.items():
                    if hashlib.sha256(k.encode()).hexdigest() == want:
                        t["expires"] = time.time() - 1
            return self.reply(200, {})
        if path == "/_double/check":
            # {"repository": "owner/name", "access": "read"|"write"}, token in Authorization
            req = self.body()
            with lock:
                t = live(token_of(auth) or "")
            if t is None:
                return self.reply(401, {"message": "Bad credentials"})
            if req.get("repository") not in t["repos"]:
                return self.reply(403, {"message": "not this repository"})
            need = 2 if req.get("access") == "write" else 1
            if LEVEL.get(t["permissions"].get("contents"), 0) < need:
                return self.reply(403, {"message": "contents permission too low"})
            return self.reply(200, {})
        return self.reply(404, {"message": "Not Found"})

    def do_DELETE(self):
        if self.path != "/installation/token":
            return self.reply(404, {"message": "Not Found"})
        with lock:
            tok = token_of(self.headers.get("Authorization", "")) or ""
            t = live(tok)
            if t is None:
                return self.reply(401, {"message": "Bad credentials"})
            t["revoked"] = True
            counters["revokes"] += 1
        return self.reply(204)

    def do_GET(self):
        if self.path == "/_double/tokens":
            # what each token is, by its SHA-256 (the test compares what a sandbox saw)
            with lock:
                return self.reply(200, [{"sha256": hashlib.sha256(k.encode()).hexdigest(),
                                         "repositories": sorted(t["repos"]), "permissions": t["permissions"],
                                         "live": live(k) is not None} for k, t in tokens.items()])
        if self.path == "/_double/counters":
            with lock:
                return self.reply(200, dict(counters, live=sum(1 for t in tokens if live(t))))
        return self.reply(404, {"message": "Not Found"})


serve(PORTFILE, Handler)
