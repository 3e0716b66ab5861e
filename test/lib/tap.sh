#!/usr/bin/env bash
# test/lib/tap.sh: the one shell TAP helper of the shell-based test files (sourced through
# test/e2e/lib.sh and test/sandboxd/lib.sh). A file that cannot run here says so before its
# plan with skip_all; a part of a file that cannot run emits one skip line per test it leaves
# out (skip REASON COUNT), so the plan holds on every path and test/lib/coverage.sh counts
# what was skipped instead of taking it for a pass.

TAP_N=0
TAP_FAILED=0

# plan N: the number of tests this file runs on every path
plan() { echo "1..$1"; }

# skip_all REASON: the whole file cannot run here; call it before plan, it exits
skip_all() { echo "1..0 # SKIP $1"; exit 0; }

# ok CONDITION_EXIT_STATUS DESCRIPTION
ok() {
    TAP_N=$((TAP_N + 1))
    if [ "$1" -eq 0 ]; then echo "ok $TAP_N - $2"; else echo "not ok $TAP_N - $2"; TAP_FAILED=$((TAP_FAILED + 1)); fi
}

# is GOT EXPECTED DESCRIPTION
is() {
    if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got: '$1'"; echo "#   expected: '$2'"; fi
}

# like GOT REGEX DESCRIPTION
like() {
    if echo "$1" | grep -qE -- "$2"; then ok 0 "$3"; else ok 1 "$3"; echo "#   got: '$1'"; echo "#   expected to match: '$2'"; fi
}

# skip REASON [COUNT]: COUNT (default 1) tests that do not run here, one skip line each
skip() {
    local i
    for ((i = 0; i < ${2:-1}; i++)); do TAP_N=$((TAP_N + 1)); echo "ok $TAP_N # SKIP $1"; done
}

diag() { echo "# $*"; }

# done_testing: exit status 1 when any test failed
done_testing() { exit $((TAP_FAILED > 0)); }
