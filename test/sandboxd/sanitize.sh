#!/usr/bin/env bash
# test/sandboxd/sanitize.sh: the daemon tests (test/sandboxd/*.t) against the sanitizer builds
# of mesh-sandboxd: ThreadSanitizer (make tsan) and, side by side with it, AddressSanitizer +
# LeakSanitizer + UndefinedBehaviorSanitizer (make asan). Prints TAP; fails on any failing test
# and on any sanitizer report. Reports go to files (log_path), because the tests keep daemon
# stderr in directories they delete; every daemon stops with SIGTERM first so LeakSanitizer runs.
#
#   bash test/sandboxd/sanitize.sh [tsan|asan ...]     (default: both)
#   MESH_SANITIZE_TESTS="test/sandboxd/03-isolation.t ..." runs those files only (default: all)
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

# build_kind KIND: builds mesh-sandboxd-KIND.
build_kind() {
    mkdir -m 1777 "$WORK/$1"
    make -s -C src/sandboxd "mesh-sandboxd-$1" >"$WORK/$1.build" 2>&1
}

# prove_kind KIND: the daemon tests with mesh-sandboxd-KIND (exit status: prove's).
prove_kind() {
    local common="halt_on_error=1 exitcode=66 log_path=$WORK/$1/report"
    TSAN_OPTIONS="$common second_deadlock_stack=1" \
    ASAN_OPTIONS="$common detect_leaks=1 detect_stack_use_after_return=0" \
    UBSAN_OPTIONS="$common print_stacktrace=1" \
    MESH_SANDBOXD="$ROOT/src/sandboxd/mesh-sandboxd-$1" timeout 900 \
        prove -v ${MESH_SANITIZE_TESTS:-test/sandboxd/*.t} >"$WORK/$1.out" 2>&1
}

# report_kind KIND BUILD_STATUS PROVE_STATUS: its TAP lines, and the sanitizer's reports. A
# report is an error, a race, a leak or undefined behaviour. Not one: ASan's warning that it
# ignores __asan_handle_no_return, printed when a child started on a stack of its own
# (spawn_borrowing) calls _exit.
report_kind() {
    local kind=$1 logs="$WORK/$1" reports
    result "$2" "mesh-sandboxd-$kind builds"
    grep -E -A4 '^not ok' "$WORK/$kind.out" | sed 's/^/# /'
    grep -E '^Files=|^Result' "$WORK/$kind.out" | sed 's/^/# /'
    result "$3" "daemon tests pass under $kind"
    reports=$(grep -lE 'ERROR: |WARNING: ThreadSanitizer|runtime error:' "$logs"/* 2>/dev/null | wc -l)
    result "$reports" "no $kind report ($reports files)"
    for f in $(grep -lE 'ERROR: |WARNING: ThreadSanitizer|runtime error:' "$logs"/* 2>/dev/null); do
        head -60 "$f" | sed 's/^/# /'
    done
}

kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(tsan asan)
echo "1..$((3 * ${#kinds[@]}))"
# The kinds' suites run side by side: each waits on daemons and sandboxes about as much as it
# computes, and CI's 20 minutes want the time. Every test has its own state dir, port, cgroup
# name and unique sleep durations, so two runs do not meet.
declare -A built proved pids
for kind in "${kinds[@]}"; do build_kind "$kind"; built[$kind]=$?; done
for kind in "${kinds[@]}"; do
    if [ "${built[$kind]}" -eq 0 ]; then prove_kind "$kind" & pids[$kind]=$!; else : >"$WORK/$kind.out"; fi
done
for kind in "${kinds[@]}"; do
    proved[$kind]=1
    [ -z "${pids[$kind]:-}" ] || { wait "${pids[$kind]}"; proved[$kind]=$?; }
    report_kind "$kind" "${built[$kind]}" "${proved[$kind]}"
done
echo "# outputs: $WORK"
exit $FAILED
