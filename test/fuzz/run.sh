#!/usr/bin/env bash
# test/fuzz/run.sh: builds the libFuzzer targets and runs each for a bounded time on a copy of
# its committed corpus (the repository is never written). Prints TAP: one line per target,
# "not ok" when the fuzzer found a crash, a leak or a broken property (its report follows).
#
#   bash test/fuzz/run.sh [SECONDS_PER_TARGET]     (default 30, MESH_FUZZ_SECONDS overrides)
set -uo pipefail
cd "$(dirname "$0")"
SECONDS_EACH=${1:-${MESH_FUZZ_SECONDS:-30}}
TARGETS=(fuzz_route fuzz_base64 fuzz_requests fuzz_kubernetes fuzz_agent fuzz_docker fuzz_sandboxd fuzz_edge fuzz_repos)
WORK=$(mktemp -d /tmp/mesh-fuzz.XXXXXX)
echo "1..$(( ${#TARGETS[@]} + 1 ))"
make -s >"$WORK/build.log" 2>&1
if [ $? -eq 0 ]; then echo "ok 1 - fuzz targets build"; else echo "not ok 1 - fuzz targets build"; sed 's/^/# /' "$WORK/build.log"; exit 1; fi
n=1; failed=0
for t in "${TARGETS[@]}"; do
    n=$((n + 1))
    mkdir -p "$WORK/$t"
    cp corpus/"$t"/* "$WORK/$t"/
    timeout $((SECONDS_EACH + 60)) ./"$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=1024 \
        -artifact_prefix="$WORK/$t-" "$WORK/$t" >"$WORK/$t.log" 2>&1
    rc=$?
    runs=$(grep -oE 'Done [0-9]+ runs' "$WORK/$t.log" | grep -oE '[0-9]+')
    if [ $rc -eq 0 ]; then
        echo "ok $n - $t: ${runs:-?} inputs in ${SECONDS_EACH}s, nothing found"
    else
        echo "not ok $n - $t (exit $rc)"; failed=1
        grep -E 'ERROR|SUMMARY|#[0-9]+ 0x|artifact' "$WORK/$t.log" | head -30 | sed 's/^/# /'
    fi
done
echo "# logs and any crashing inputs: $WORK"
exit $failed
