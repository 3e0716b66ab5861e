#!/usr/bin/env bash
# Invariant 6 (docs/design.md): nothing above src/backends/ names a backend.  Fails if C code outside
# src/backends/ (and the daemon itself) holds a driver name as a string literal, or
# compares a backend's name or driver with any literal.
cd "$(dirname "$0")/../.."
. test/e2e/lib.sh
plan 3
drivers=$(sed -n 's/^\s*\.name = "\([a-z0-9_-]*\)".*/\1/p' src/backends/*.c | sort -u)
[ -n "$drivers" ]; ok $? "driver names found in src/backends/: $(echo $drivers)"

above=$(find src -name '*.c' -o -name '*.h' | grep -v '^src/backends/' | grep -v '^src/sandboxd/')
hits=""
for d in $drivers docker kubernetes sprites isolate local; do
  h=$(grep -nE "\"$d\"" $above 2>/dev/null)
  [ -n "$h" ] && hits="$hits$h"$'\n'
done
[ -z "$hits" ]; ok $? "no driver or backend name literal above src/backends/"
[ -n "$hits" ] && echo "$hits" | sed 's/^/# /'

cmp=$(grep -nE "(strcmp|strncmp|pg_strcasecmp)\s*\([^;]*(driver|backend_kind|backend->name|be\.name|be->name)[^;]*\"" $above)
[ -z "$cmp" ]; ok $? "no comparison of a backend's name or driver with a literal above src/backends/"
[ -n "$cmp" ] && echo "$cmp" | sed 's/^/# /'
done_testing
