#!/usr/bin/env bash
# Unit tests of the docker driver's reader of its output script's answers and its key and
# signal checks (src/backends/docker_background.c: C library only, no server runtime), compiled
# here with the system compiler.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/mesh-docker-parsers.XXXXXX)
trap 'rm -rf "$work"' EXIT
if ! cc -Wall -Wextra -Werror -std=gnu11 -I "$root/src" -o "$work/parsers_test" \
     "$root/test/docker/parsers_test.c" "$root/src/backends/docker_background.c" 2> "$work/cc.err"; then
  echo "1..1"; echo "not ok 1 - the parser tests build"; sed 's/^/# /' "$work/cc.err"; exit 1
fi
exec "$work/parsers_test"
