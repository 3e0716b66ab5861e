#!/usr/bin/env bash
# test/run.sh: the whole test suite, on a fresh Debian 12 machine, as root.
#
#   test/run.sh             (as root)
#
# Installs what it needs, builds and installs mesh_exec and mesh-sandboxd,
# starts a throwaway PostgreSQL 15 cluster with mesh_exec preloaded (and its
# embedded mesh-sandboxd), then runs, against those real processes:
#   1. pg_regress  (sql/ + expected/)          SQL behaviour
#   2. pg_prove    (test/pgtap/*.sql)          richer checks in SQL
#   3. prove       (test/e2e/*.t)              concurrency and faults: real signals
#   4. prove       (test/sandboxd/*.t)         the daemon over real HTTP
# (the "kubernetes" backend of 3 and of the conformance suite runs against a test double of
# the Kubernetes API server, test/kubernetes/, whose pods are real mesh-sandboxd processes)
#   5. with MESH_SANITIZERS=1 (CI): the daemon tests under TSan and ASan+UBSan, and the fuzzers
# and prints per layer "-> layer: P passed, F failed, S skipped" (test/lib/coverage.sh), then
# "N passed, M failed, K skipped, T todo".  Exit status is non-zero on any failure, on anything
# the run left behind (test/lib/leftovers.sh) and, with MESH_COVERAGE_ENFORCE=1 (CI), on a layer
# below its floor in test/expected_coverage or skipped as a whole.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

bash test/lib/deps.sh || exit 1
make -s >/dev/null && make -s install >/dev/null || { echo "build failed"; exit 1; }

export MESH_TEST_WORK=${MESH_TEST_WORK:-$(mktemp -d /tmp/mesh-test.XXXXXX)}
# the workspaces' own filesystem (mesh-sandboxd --setup-host): small, the tests fill it
export MESH_DISK_BYTES=${MESH_DISK_BYTES:-536870912}
chmod 755 "$MESH_TEST_WORK"
# shellcheck source=test/lib/cluster.sh
. test/lib/cluster.sh
PGDIR=$MESH_TEST_WORK/pg
cleanup() { mesh_cluster_stop "$PGDIR"; }
trap cleanup EXIT

# per-layer counts, floors and the closing line (test/lib/coverage.sh); what this run leaves
# behind (test/lib/leftovers.sh)
# shellcheck source=test/lib/coverage.sh
. test/lib/coverage.sh
# shellcheck source=test/lib/leftovers.sh
. test/lib/leftovers.sh
leftovers_begin

mesh_cluster_start "$PGDIR" "mesh.embedded_sandboxd = on" || { echo "cluster did not start"; exit 1; }
mesh_wait_embedded "$PGDIR" || { tail -20 "$PGDIR/server.log"; exit 1; }
psql -X -q -c "CREATE EXTENSION mesh_exec" || exit 1
mesh_wait_workers || exit 1

# the Kubernetes API-server TEST DOUBLE (test/lib/kubernetes.sh) serves the "kubernetes" backend
# of the e2e and conformance suites; when it cannot start here, they skip it visibly
# shellcheck source=test/lib/kubernetes.sh
. test/lib/kubernetes.sh
if mesh_k8s_start "$MESH_TEST_WORK/k8s" 2> "$MESH_TEST_WORK/k8s.err"; then
  export MESH_CREDENTIAL_FILE_kubernetes=$MESH_K8S_TOKEN_FILE
else
  export MESH_K8S_URL_SKIP="the Kubernetes API-server double could not start: $(tr '\n' ' ' < "$MESH_TEST_WORK/k8s.err" | cut -c1-200)"
fi
# the Fly.io Sprites API TEST DOUBLE (test/lib/edge.sh) serves the "edge" backend likewise
# shellcheck source=test/lib/edge.sh
. test/lib/edge.sh
if mesh_edge_start "$MESH_TEST_WORK/edge" 2> "$MESH_TEST_WORK/edge.err"; then
  export MESH_CREDENTIAL_FILE_edge=$MESH_EDGE_TOKEN_FILE
else
  export MESH_EDGE_URL_SKIP="the Sprites API double could not start: $(tr '\n' ' ' < "$MESH_TEST_WORK/edge.err" | cut -c1-200)"
fi
trap 'mesh_edge_stop; mesh_k8s_stop; cleanup' EXIT

echo "== pg_regress (sql/)"
make -s installcheck > "$MESH_TEST_WORK/regress.out" 2>&1
grep -E '^(test| ) |^ok |^not ok ' "$MESH_TEST_WORK/regress.out" | sed 's/^/  /'
grep -qE '\.\.\. FAILED|^not ok ' "$MESH_TEST_WORK/regress.out" && [ -f regression.diffs ] && head -100 regression.diffs
cov_regress "$MESH_TEST_WORK/regress.out"

if ls test/pgtap/*.sql >/dev/null 2>&1; then
  echo "== pg_prove (test/pgtap/)"
  psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
  pg_prove -v test/pgtap/*.sql > "$MESH_TEST_WORK/pgtap.out" 2>&1; rc=$?
  grep -E '^not ok|^# ' "$MESH_TEST_WORK/pgtap.out" | head -40
  tail -3 "$MESH_TEST_WORK/pgtap.out"
  cov_tap pgtap "$MESH_TEST_WORK/pgtap.out" $rc
fi

# The daemon's own tests (test/sandboxd/, no PostgreSQL) run beside the e2e suite, which
# spends most of its time waiting on its cluster; their results are reported in order below.
sandboxd_pid=
if ls test/sandboxd/*.t >/dev/null 2>&1; then
  # its exit status goes to a file: by the time it is waited for, tens of thousands of processes
  # later, its pid may have been reused and bash may have forgotten it ("not a child")
  { prove -v test/sandboxd/*.t > "$MESH_TEST_WORK/sandboxd.out" 2>&1; echo $? > "$MESH_TEST_WORK/sandboxd.rc"; } &
  sandboxd_pid=$!
fi

if ls test/e2e/*.t >/dev/null 2>&1; then
  echo "== prove (test/e2e/)"
  PGDIR=$PGDIR prove -v test/e2e/*.t > "$MESH_TEST_WORK/e2e.out" 2>&1; rc=$?
  grep -E '^not ok|^# ' "$MESH_TEST_WORK/e2e.out" | head -40
  tail -3 "$MESH_TEST_WORK/e2e.out"
  cov_tap e2e "$MESH_TEST_WORK/e2e.out" $rc
fi

# --- conformance (test/conformance/, test/lib/docker.sh): the same pgTAP files against every
# backend in test/conformance/backends.list; a private dockerd serves the "docker" backend and
# is stopped on exit even on failure; when it cannot start here, docker is skipped visibly.
if [ -x test/conformance/run.sh ]; then
  echo "== conformance (test/conformance/)"
  # shellcheck source=test/lib/docker.sh
  . test/lib/docker.sh
  trap 'mesh_docker_stop; mesh_edge_stop; mesh_k8s_stop; cleanup' EXIT
  if mesh_docker_start "$MESH_TEST_WORK/docker" 2> "$MESH_TEST_WORK/docker.err" \
     && mesh_docker_image mesh-conformance 2>> "$MESH_TEST_WORK/docker.err"; then
    export MESH_DOCKER_SOCKET="$MESH_TEST_WORK/docker/docker.sock" MESH_DOCKER_IMAGE=mesh-conformance
  else
    export MESH_DOCKER_SKIP="dockerd could not run here: $(tr '\n' ' ' < "$MESH_TEST_WORK/docker.err" | cut -c1-200)"
  fi
  # an isolate host (src/isolated/) serves the "isolate" backend: a process group of its own,
  # killed whole after the suite
  isolate_home=${MESH_ISOLATE_HOME:-/usr/local/lib/mesh-isolated} isolate_pgid=""
  if [ -x "$isolate_home/mesh-isolated" ]; then
    setsid "$isolate_home/mesh-isolated" $((MESH_PORT + 72)) 4 > "$MESH_TEST_WORK/isolated.log" 2>&1 &
    isolate_pgid=$!
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$((MESH_PORT + 72))/v1/health" >/dev/null && break; sleep 0.1; done
    export MESH_ISOLATE_URL="http://127.0.0.1:$((MESH_PORT + 72))"
  else
    export MESH_ISOLATE_URL_SKIP="mesh-isolated is not installed (src/isolated/install.sh)"
  fi
  psql -X -q -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
  test/conformance/run.sh > "$MESH_TEST_WORK/conformance.out" 2>&1; rc=$?
  [ -z "$isolate_pgid" ] || { kill -- -"$isolate_pgid" 2>/dev/null; wait "$isolate_pgid" 2>/dev/null; }
  grep -E '^not ok|^# (backend|SKIP|Failed)' "$MESH_TEST_WORK/conformance.out" | head -40
  grep -E '^Files=|^Result' "$MESH_TEST_WORK/conformance.out"
  cov_conformance "$MESH_TEST_WORK/conformance.out" $rc
  mesh_docker_stop
fi
# --- end conformance

if [ -n "$sandboxd_pid" ]; then
  echo "== prove (test/sandboxd/)"
  wait "$sandboxd_pid" 2>/dev/null
  rc=$(cat "$MESH_TEST_WORK/sandboxd.rc" 2>/dev/null || echo 1)
  grep -E '^not ok' "$MESH_TEST_WORK/sandboxd.out" | head -40
  tail -3 "$MESH_TEST_WORK/sandboxd.out"
  cov_tap daemon "$MESH_TEST_WORK/sandboxd.out" $rc
fi

# --- sanitizers and fuzzers (.ci/run sets MESH_SANITIZERS=1): the daemon tests again under
# ThreadSanitizer and under ASan+LSan+UBSan, failing on any report (test/sandboxd/sanitize.sh),
# then each libFuzzer target for a bounded time (test/fuzz/run.sh).
if [ "${MESH_SANITIZERS:-0}" = 1 ]; then
  echo "== sanitizers (test/sandboxd/ under tsan and asan)"
  bash test/sandboxd/sanitize.sh > "$MESH_TEST_WORK/sanitize.out" 2>&1; rc=$?
  grep -E '^not ok|^# (not ok|Result|=+|SUMMARY|WARNING)' "$MESH_TEST_WORK/sanitize.out" | head -40
  cov_tap sanitizers "$MESH_TEST_WORK/sanitize.out" $rc
  echo "== fuzzing (test/fuzz/, ${MESH_FUZZ_SECONDS:-30}s per target)"
  bash test/fuzz/run.sh > "$MESH_TEST_WORK/fuzz.out" 2>&1; rc=$?
  grep -E '^(not )?ok|^# ' "$MESH_TEST_WORK/fuzz.out" | head -40
  cov_tap fuzzers "$MESH_TEST_WORK/fuzz.out" $rc
else
  echo "== sanitizers and fuzzing: not run (MESH_SANITIZERS is not 1)"
  cov_skip_layer sanitizers "MESH_SANITIZERS is not 1"
  cov_skip_layer fuzzers "MESH_SANITIZERS is not 1"
fi

# what this run left running, in a cgroup or mounted (test/lib/leftovers.sh): checked once the
# run's own cluster and Kubernetes API-server double are stopped (dockerd stopped above)
mesh_edge_stop; mesh_k8s_stop; cleanup; trap - EXIT
EXTRA_FAILED=0
leftovers_check || EXTRA_FAILED=1
echo "logs and outputs: $MESH_TEST_WORK"
cov_final
