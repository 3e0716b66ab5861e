#!/usr/bin/env bash
# test/sandboxd/sanitize.sh: the daemon tests (test/sandboxd/*.t) against the sanitizer builds
# of mesh-sandboxd: ThreadSanitizer (make tsan), then AddressSanitizer + LeakSanitizer +
# UndefinedBehaviorSanitizer (make asan). Prints TAP; fails on any failing test and on any
# sanitizer report. Reports go to files (log_path), because the tests keep daemon stderr in
# directories they delete; every daemon stops with SIGTERM first so LeakSanitizer runs.
#
#   bash test/sandboxd/sanitize.sh [tsan|asan ...]     (default: both)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
WORK=$(mktemp -d /tmp/mesh-sanitize.XXXXXX)
chmod 1777 "$WORK"   # non-root daemons (07-nonroot.t) write their reports here too
N=0
FAILED=0
result() {  # result STATUS DESCRIPTION
    N=$((N + 1))
    if [ "$1" -eq 0 ]; then echo "ok $N - $2"; else echo "not ok $N - $2"; FAILED=1; fi
}

# run_kind KIND: builds mesh-sandboxd-KIND, runs the daemon tests with it, checks the reports.
run_kind() {
    local kind=$1 logs="$WORK/$1" rc
    mkdir -m 1777 "$logs"
    make -s -C src/sandboxd "mesh-sandboxd-$kind" >"$WORK/$kind.build" 2>&1
    result $? "mesh-sandboxd-$kind builds"
    local common="halt_on_error=1 exitcode=66 log_path=$logs/report"
    export TSAN_OPTIONS="$common second_deadlock_stack=1"
    export ASAN_OPTIONS="$common detect_leaks=1 detect_stack_use_after_return=0"
    export UBSAN_OPTIONS="$common print_stacktrace=1"
    MESH_SANDBOXD="$ROOT/src/sandboxd/mesh-sandboxd-$kind" timeout 900 \
        prove -v test/sandboxd/*.t >"$WORK/$kind.out" 2>&1
    rc=$?
    grep -E -A4 '^not ok' "$WORK/$kind.out" | sed 's/^/# /'
    grep -E '^Files=|^Result' "$WORK/$kind.out" | sed 's/^/# /'
    result $rc "daemon tests pass under $kind"
    # A report is an error, a race, a leak or undefined behaviour. Not one: ASan's warning that
    # it ignores __asan_handle_no_return, printed when a child started on a stack of its own
    # (spawn_borrowing) calls _exit.
    local reports
    reports=$(grep -lE 'ERROR: |WARNING: ThreadSanitizer|runtime error:' "$logs"/* 2>/dev/null | wc -l)
    result "$reports" "no $kind report ($reports files)"
    for f in $(grep -lE 'ERROR: |WARNING: ThreadSanitizer|runtime error:' "$logs"/* 2>/dev/null); do
        head -60 "$f" | sed 's/^/# /'
    done
}

kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(tsan asan)
echo "1..$((3 * ${#kinds[@]}))"
for kind in "${kinds[@]}"; do run_kind "$kind"; done
echo "# outputs: $WORK"
exit $FAILED
