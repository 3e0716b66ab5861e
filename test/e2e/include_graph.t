#!/usr/bin/env bash
# The daemon's modules form a tree (src/sandboxd/config.h): no include circle among
# src/sandboxd's files (x.c and x.h are one module), its ground floor (config, tiers, layout,
# registry, json, log, util, cgroup, reaper) includes nothing above it, and every header is one
# module's own (no catch-all header that would let any file reach any other). The checker,
# test/lib/include_graph.py, is proven on planted trees: it finds a circle and a floor
# violation, and passes a tree that has neither. The extension's src/ has no include circle
# either (settings.h is its floor: every file reads the settings without depending on module
# load or the hand-off).
# Needs no database: only the sources and python3.
cd "$(dirname "$0")/../.."
. test/e2e/lib.sh
CHECK="python3 test/lib/include_graph.py"
FLOOR=config,tiers,layout,registry,json,log,util,cgroup,reaper
plan 10

out=$($CHECK src/sandboxd --floor "$FLOOR" 2>&1); rc=$?
is "$rc" 0 "src/sandboxd: the include checker passes (no circle, floor holds)"
[ "$rc" -eq 0 ] || echo "$out" | sed 's/^/# /'
echo "$out" | grep -qx "circles: none"; ok $? "src/sandboxd: no include circle among its modules"
echo "$out" | grep -q "^floor: holds"; ok $? "src/sandboxd: the ground floor ($FLOOR) includes nothing above it"

orphans=""
for h in src/sandboxd/*.h; do [ -f "${h%.h}.c" ] || orphans="$orphans $(basename "$h")"; done
is "$orphans" "" "src/sandboxd: every header is one module's own (x.h beside x.c, no catch-all header)"

# positive controls: planted trees in a temporary directory
T=$(mktemp -d /tmp/mesh-include-graph.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir "$T/two" "$T/three" "$T/floor"
# two modules that include each other, .c to .h both ways
printf '#include "a.h"\n#include "b.h"\nint a(void) { return b(); }\n' > "$T/two/a.c"
printf 'int a(void);\n' > "$T/two/a.h"
printf '#include "b.h"\n#include "a.h"\n#include <stdio.h>\nint b(void) { return a(); }\n' > "$T/two/b.c"
printf 'int b(void);\n' > "$T/two/b.h"
out=$($CHECK "$T/two" 2>&1); rc=$?
[ "$rc" -eq 1 ] && echo "$out" | grep -qx "circle: 2 modules: a b"
r=$?; ok $r "control: a planted circle of two modules (a.c -> b.h, b.c -> a.h) is found"
[ $r -eq 0 ] || echo "$out" | sed 's/^/# /'

# three modules in a circle through headers only
printf '#include "b.h"\n' > "$T/three/a.h"; printf '#include "a.h"\n' > "$T/three/a.c"
printf '#include "c.h"\n' > "$T/three/b.h"
printf '#include "a.h"\n' > "$T/three/c.h"
out=$($CHECK "$T/three" 2>&1); rc=$?
[ "$rc" -eq 1 ] && echo "$out" | grep -qx "circle: 3 modules: a b c" &&
  echo "$out" | grep -q "loop: a -> b -> c -> a"
r=$?; ok $r "control: a planted circle of three modules through headers is found, with its loop"
[ $r -eq 0 ] || echo "$out" | sed 's/^/# /'

# no circle, but a floor module (base) includes one above the floor (top)
printf '#include "base.h"\n#include "top.h"\n' > "$T/floor/base.c"; : > "$T/floor/base.h"
printf '#include "lib.h"\n' > "$T/floor/lib.c"; : > "$T/floor/lib.h"
printf '#include "top.h"\n' > "$T/floor/top.c"; printf '#include "lib.h"\n' > "$T/floor/top.h"
out=$($CHECK "$T/floor" --floor base,lib 2>&1); rc=$?
[ "$rc" -eq 1 ] && echo "$out" | grep -qx "circles: none" &&
  echo "$out" | grep -q "^floor: base includes top, above the floor (base.c:2"
r=$?; ok $r "control: a planted floor violation (base.c includes top.h) is found"
[ $r -eq 0 ] || echo "$out" | sed 's/^/# /'

out=$($CHECK "$T/floor" --floor lib 2>&1); rc=$?
is "$rc" 0 "control: the same tree passes with a floor that holds (lib alone)"

$CHECK "$T/floor" --floor lib,nosuch >/dev/null 2>&1
is "$?" 2 "control: a floor module the directory does not have is a usage error"

# the extension's src/: no include circle, and its settings include nothing of its own
out=$($CHECK src --floor settings 2>&1)
ok $? "src/ (the extension): no include circle among its modules, settings.h is a floor"
[ -n "$out" ] && echo "$out" | sed 's/^/# /'
done_testing
