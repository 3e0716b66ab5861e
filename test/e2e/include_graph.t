#!/usr/bin/env bash
# The daemon's modules form a tree (src/sandboxd/config.h): no include circle among
# src/sandboxd's files (x.c and x.h are one module), its ground floor (config, tiers, layout,
# registry, json, log, util, cgroup, reaper) includes nothing above it, and every header is one
# module's own (no catch-all header that would let any file reach any other). The checker,
# test/lib/include_graph.py, is proven on planted trees: it finds a circle and a floor
# violation, and passes a tree that has neither. The extension's src/ has no include circle
# either (settings.h is its floor: every file reads the settings without depending on module
# load or the hand-off). The worker's files form a tree counting calls too (an edge for every
# symbol one object file uses of another's): the loop (worker.c) stands on the operations, the
# operations on the call layer (worker_call, worker_reply, worker_op.h), which names none of
# them; no operation file depends on another; every worker header but the contract's types
# (worker_op.h) is one module's own. The call check is proven on planted objects as well.
# Needs no database: only the sources, the built objects (nm), gcc and python3.
cd "$(dirname "$0")/../.."
. test/e2e/lib.sh
CHECK="python3 test/lib/include_graph.py"
FLOOR=config,tiers,layout,registry,json,log,util,cgroup,reaper
plan 17

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
# the worker, includes and calls together (the object files the build left)
OPS=worker_exec,worker_background,worker_files,worker_release,worker_snapshot
out=$($CHECK src --only worker --calls --apart "$OPS" --edges 2>&1); rc=$?
is "$rc" 0 "src/worker*: the checker passes counting calls (no circle, the operations apart)"
[ "$rc" -eq 0 ] || echo "$out" | grep -v "^edge:" | sed 's/^/# /'
echo "$out" | grep -qx "circles: none"; ok $? "src/worker*: no circle of includes or calls among the worker's files"
echo "$out" | grep -q "^apart: holds"; ok $? "src/worker*: no operation file depends on another ($OPS)"
up=$(echo "$out" | grep -E "^edge: worker_(call|reply|op) -> " |
  grep -vE -- "-> worker_(op|call|failures|durable|http) " | sed 's/ (.*//')
is "$up" "" "the call layer (worker_call, worker_reply, worker_op.h) depends on no operation and not on the loop"
strays=""
for h in src/worker*.h; do
  m=$(basename "$h" .h); [ -f "src/$m.c" ] && continue
  [ "$m" = worker_op ] && ! grep -qE "^extern " "$h" && continue
  strays="$strays $m.h"
done
is "$strays" "" "every worker header is one module's own, but worker_op.h, which holds types only"

# controls for --calls: two modules whose objects call each other through one shared header
mkdir "$T/calls"
printf 'int a(void);\nint b(void);\n' > "$T/calls/shared.h"
printf '#include "shared.h"\nint a(void) { return b() + 1; }\n' > "$T/calls/a.c"
printf '#include "shared.h"\nint b(void) { return 2; }\nint c(void) { return a(); }\n' > "$T/calls/b.c"
(cd "$T/calls" && gcc -c a.c b.c) 2>/dev/null
includes_only=$($CHECK "$T/calls" 2>&1)
out=$($CHECK "$T/calls" --calls 2>&1); rc=$?
echo "$includes_only" | grep -qx "circles: none" &&
  [ "$rc" -eq 1 ] && echo "$out" | grep -qx "circle: 2 modules: a b" &&
  echo "$out" | grep -q "a.o uses b"
r=$?; ok $r "control: a circle of calls through one shared header (no include circle) is found with --calls"
[ $r -eq 0 ] || echo "$out" | sed 's/^/# /'
# b no longer calls back: no circle, but a (apart from b) still calls it
printf 'int b(void) { return 2; }\n' > "$T/calls/b.c"; (cd "$T/calls" && gcc -c b.c)
out=$($CHECK "$T/calls" --calls --apart a,b 2>&1); rc=$?
[ "$rc" -eq 1 ] && echo "$out" | grep -q "^apart: a depends on b (uses b)"
r=$?; ok $r "control: one of two apart modules calling the other is found"
[ $r -eq 0 ] || echo "$out" | sed 's/^/# /'
done_testing
