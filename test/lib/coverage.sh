#!/usr/bin/env bash
# test/lib/coverage.sh: what each layer of test/run.sh really ran, so that the suite cannot go
# green by losing tests. Sourced by test/run.sh. Counts, per layer, the tests that passed,
# failed, were skipped (`# SKIP`, a whole file's `1..0 # SKIP`, a conformance backend that
# could not run) and are todo (`# TODO`), from the layer's saved output; prints
# "-> layer: P passed, F failed, S skipped" for each. cov_final compares the layers with their
# floors (test/expected_coverage): with MESH_COVERAGE_ENFORCE=1 (.ci/run) a layer below its
# floor, a layer that did not run or a layer (a backend) skipped as a whole fails the run with
# "not ok - coverage: ..."; without it (a developer's machine) that is only reported.
# Then the closing line: "N passed, M failed, K skipped, T todo".

declare -gA COV_PASS=() COV_FAIL=() COV_SKIP=() COV_TODO=() COV_WHOLE=()
declare -ga COV_LAYERS=()
COV_FLOORS=${COV_FLOORS:-$(dirname "${BASH_SOURCE[0]}")/../expected_coverage}

# cov_add LAYER PASSED FAILED SKIPPED TODO: adds to a layer's counts and prints its line
cov_add() {
    local l=$1
    [ -n "${COV_PASS[$l]+x}" ] || { COV_LAYERS+=("$l"); COV_PASS[$l]=0; COV_FAIL[$l]=0; COV_SKIP[$l]=0; COV_TODO[$l]=0; }
    COV_PASS[$l]=$((COV_PASS[$l] + $2)); COV_FAIL[$l]=$((COV_FAIL[$l] + $3))
    COV_SKIP[$l]=$((COV_SKIP[$l] + $4)); COV_TODO[$l]=$((COV_TODO[$l] + $5))
    local todo=""; [ "${COV_TODO[$l]}" -gt 0 ] && todo=", ${COV_TODO[$l]} todo"
    echo "  -> $l: ${COV_PASS[$l]} passed, ${COV_FAIL[$l]} failed, ${COV_SKIP[$l]} skipped$todo"
}

# cov_tap_counts FILE: "PASSED FAILED SKIPPED TODO" of the TAP (or prove -v / pg_prove -v)
# output in FILE. A todo test is neither a pass nor a failure; a whole file skipped
# ("1..0 # SKIP", prove's "x.t .. skipped: why") counts one skip; a file prove reports with a
# parse error (a plan that does not match) counts one failure.
cov_tap_counts() {
    awk '
        { l = tolower($0) }
        l ~ /^[ \t]*(not )?ok [0-9]+/ {
            if (l ~ /#[ \t]*todo/) { todo++; next }
            if (l ~ /^[ \t]*not ok/) { fail++; next }
            if (l ~ /#[ \t]*skip/) { skip++; next }
            pass++; next
        }
        l ~ /^[ \t]*1\.\.0[ \t]*#[ \t]*skip/ { skip++; next }
        / \.\. skipped: / { skip++; next }
        /^[ \t]+Parse errors: / { fail++; next }
        END { printf "%d %d %d %d\n", pass, fail, skip, todo }
    ' "$1"
}

# cov_tap LAYER FILE [RC]: counts LAYER from TAP output in FILE; a runner that exited non-zero
# without a failing test line (a crash, a bail out) counts one failure.
cov_tap() {
    local p f s t
    read -r p f s t < <(cov_tap_counts "$2")
    [ "${3:-0}" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    cov_add "$1" "$p" "$f" "$s" "$t"
}

# cov_regress FILE [RC]: the pg_regress layer, from make installcheck's output
cov_regress() {
    local p f
    p=$(grep -cE '^(test| ) \S+ +\.\.\. ok|^ok ' "$1" || true)
    f=$(grep -cE '\.\.\. FAILED|^not ok ' "$1" || true)
    [ "${2:-0}" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    cov_add pg_regress "$p" "$f" 0 0
}

# cov_conformance FILE [RC]: test/conformance/run.sh's output, one layer per backend
# (conformance/NAME): its "# backend NAME" section; "# SKIP backend NAME: why" marks the backend
# skipped as a whole; "not ok - backend NAME ..." (registration) is a failure of that backend.
cov_conformance() {
    local file=$1 rc=${2:-0} dir name why p f s t any=0
    dir=$(mktemp -d /tmp/mesh-coverage.XXXXXX)
    awk -v dir="$dir" '
        /^# SKIP backend [^ :]+:/ { n = $4; sub(/:$/, "", n); w = $0; sub(/^# SKIP backend [^ :]+: */, "", w)
                                   print w > (dir "/" n ".whole"); close(dir "/" n ".whole"); next }
        /^not ok - backend [^ ]+/ { n = $5; print "not ok 0 - " $0 >> (dir "/" n ".tap"); close(dir "/" n ".tap"); next }
        /^# backend [^ ]+$/ { cur = $3; print "" >> (dir "/" cur ".tap"); next }
        cur != "" { print >> (dir "/" cur ".tap") }
        cur == "" { print >> (dir "/_before.tap") }
    ' "$file"
    for f in "$dir"/*.whole; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .whole); why=$(head -1 "$f")
        COV_WHOLE[conformance/$name]=$why
        cov_add "conformance/$name" 0 0 1 0
        echo "     (skipped as a whole: $why)"
        any=1
    done
    for f in "$dir"/*.tap; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .tap)
        [ "$name" = _before ] && continue
        cov_tap "conformance/$name" "$f"
        any=1
    done
    # a failure outside any backend's section (the probe did not start) or an exit status the
    # lines do not explain
    read -r p f s t < <(cov_tap_counts "$dir/_before.tap" 2>/dev/null || echo "0 0 0 0")
    local total_f=0 l
    for l in "${COV_LAYERS[@]}"; do case "$l" in conformance/*) total_f=$((total_f + COV_FAIL[$l])) ;; esac; done
    if [ "$rc" -ne 0 ] && [ "$total_f" -eq 0 ] || [ "$any" -eq 0 ]; then
        [ -s "$dir/_before.tap" ] && sed 's/^/  # /' "$dir/_before.tap" | head -5
        cov_add conformance 0 1 0 0
    fi
    rm -rf "$dir"
}

# cov_skip_layer LAYER REASON: a layer that did not run here at all
cov_skip_layer() {
    COV_WHOLE[$1]=$2
    cov_add "$1" 0 0 1 0
    echo "     (skipped as a whole: $2)"
}

# cov_floor LAYER: the floor test/expected_coverage sets for LAYER (empty: none)
cov_floor() {
    awk -v l="$1" '$1 == l { print $2; exit }' "$COV_FLOORS" 2>/dev/null
}

# cov_final: the floors' check, then the closing line; exit status non-zero when any test
# failed, nothing passed, or (enforced) coverage was lost. EXTRA_FAILED (a count) adds failures
# found outside the layers (test/lib/leftovers.sh).
cov_final() {
    local enforce=${MESH_COVERAGE_ENFORCE:-0} l floor p lost=0 msg
    local tp=0 tf=${EXTRA_FAILED:-0} ts=0 tt=0
    while read -r l floor _; do
        case "$l" in ''|'#'*) continue ;; esac
        msg=
        if [ -z "${COV_PASS[$l]+x}" ]; then
            msg="$l did not run (its floor is $floor passed)"
        elif [ -n "${COV_WHOLE[$l]:-}" ]; then
            msg="$l skipped as a whole: ${COV_WHOLE[$l]}"
        elif [ "${COV_PASS[$l]}" -lt "$floor" ]; then
            msg="$l: ${COV_PASS[$l]} passed, below its floor of $floor (test/expected_coverage)"
        fi
        [ -n "$msg" ] || continue
        if [ "$enforce" = 1 ]; then echo "not ok - coverage: $msg"; lost=$((lost + 1))
        else echo "# coverage (not enforced; MESH_COVERAGE_ENFORCE=1 would fail): $msg"; fi
    done < "$COV_FLOORS"
    for l in "${COV_LAYERS[@]}"; do
        tp=$((tp + COV_PASS[$l])); tf=$((tf + COV_FAIL[$l])); ts=$((ts + COV_SKIP[$l])); tt=$((tt + COV_TODO[$l]))
    done
    tf=$((tf + lost))
    echo "$tp passed, $tf failed, $ts skipped, $tt todo"
    [ "$tf" -eq 0 ] && [ "$tp" -gt 0 ]
}
