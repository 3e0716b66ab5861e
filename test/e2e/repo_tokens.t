#!/usr/bin/env bash
# Repository tokens (issue 31): the GitHub App JWT and the mint/revoke protocol pieces
# (src/repos/: C library, libcrypto, jansson; no server runtime), compiled here with the
# system compiler and run against the GitHub API double (test/repos/github_double.py), which
# verifies the JWT with the App's public key and enforces scoping and revocation; GitLab's pieces
# (src/repos/gitlab.c) are checked on their own.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/mesh-repo-tokens.XXXXXX)
double_pid=
trap '[ -n "$double_pid" ] && kill "$double_pid" 2>/dev/null; rm -rf "$work"' EXIT
if ! cc -Wall -Wextra -Werror -std=gnu11 -I "$root/src" -o "$work/repos_test" \
     "$root/test/repos/repos_test.c" "$root/src/repos/jwt.c" "$root/src/repos/github.c" "$root/src/repos/gitlab.c" \
     $(pkg-config --cflags --libs libcrypto jansson libcurl) 2> "$work/cc.err"; then
  echo "1..1"; echo "not ok 1 - the repository token tests build"; sed 's/^/# /' "$work/cc.err"; exit 1
fi
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/app.pem" 2>/dev/null
openssl pkey -in "$work/app.pem" -pubout -out "$work/app.pub" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/other.pem" 2>/dev/null
python3 "$root/test/repos/github_double.py" "$work/port" 4242 "$work/app.pub" 77 octo widgets,gadgets &
double_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
"$work/repos_test" "http://127.0.0.1:$(cat "$work/port")" 4242 "$work/app.pem" "$work/other.pem" 77
