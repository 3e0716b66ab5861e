#!/usr/bin/env bash
# Unit tests of the kubernetes driver's readers of API-server answers
# (src/backends/kubernetes_parse.c: jansson only, no server runtime) against the recorded-shape
# answers in test/kubernetes/fixtures/, compiled here with the system compiler.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/mesh-k8s-parsers.XXXXXX)
trap 'rm -rf "$work"' EXIT
if ! cc -Wall -Wextra -Werror -std=gnu11 -I "$root/src" -o "$work/parsers_test" \
     "$root/test/kubernetes/parsers_test.c" "$root/src/backends/kubernetes_parse.c" \
     $(pkg-config --cflags --libs jansson) 2> "$work/cc.err"; then
  echo "1..1"; echo "not ok 1 - the parser tests build"; sed 's/^/# /' "$work/cc.err"; exit 1
fi
exec "$work/parsers_test" "$root/test/kubernetes/fixtures"
