#!/usr/bin/env bash
# bench/checkout.sh: mesh_checkout of a repository of SIZE_MB (default 50) of incompressible
# files, cold (a fresh clone) against warm (a run of the project started from a snapshot that
# holds the clone, one commit behind: a fetch of the delta), and a plain `git clone` on the host
# from the same server as the baseline, measured in one run.
#
#   sudo bench/checkout.sh [ITERATIONS] [SIZE_MB]        (default: 3 50)
#
# The git server is test/repos/git_server.py (real `git http-backend`, every request's token
# checked with the GitHub API TEST DOUBLE, test/repos/github_double.py), listening inside each
# run's sandbox network namespace as in test/e2e/checkout.t.  Each figure is the median of
# ITERATIONS, timed by psql around mesh_checkout (its three execs: the credential helper
# written, clone or fetch, the branch), with the bytes the server answered.
set -euo pipefail
cd "$(dirname "$0")/.."
ITER=${1:-3}
SIZE_MB=${2:-50}
export MESH_PORT=${MESH_PORT:-5519}
GPORT=$((MESH_PORT + 90))
. bench/lib.sh
pids=()
stop_servers() { kill "${pids[@]}" 2>/dev/null || true; }
BENCH_ON_EXIT=stop_servers
bench_cluster 2
repos_dir=$PWD/test/repos

# the GitHub API double, the App's key, the repository (SIZE_MB of 1 MiB random files)
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$WORK/app.pem" 2>/dev/null
openssl pkey -in "$WORK/app.pem" -pubout -out "$WORK/app.pub" 2>/dev/null
python3 "$repos_dir/github_double.py" "$WORK/port" 4242 "$WORK/app.pub" 77 octo big &
pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.1; done
api="http://127.0.0.1:$(cat "$WORK/port")"
git init -q -b main "$WORK/src"
for i in $(seq 1 "$SIZE_MB"); do head -c 1048576 /dev/urandom > "$WORK/src/blob-$i"; done
git -C "$WORK/src" add .
git -C "$WORK/src" -c user.name=b -c user.email=b@b commit -q -m "big: first"
mkdir -p "$WORK/git/octo"
git clone -q --bare "$WORK/src" "$WORK/git/octo/big.git"

psql -X -qAt -v ON_ERROR_STOP=1 -v key="$(cat "$WORK/app.pem")" -v host="127.0.0.1:$GPORT" -v api="$api" >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT mesh.repository_provider_set('gh-bench', 'github', :'host', :'api', '4242', '77');
SELECT mesh.repository_provider_set_credential('gh-bench', :'key');
SELECT mesh.repository_provider_set_git_url('gh-bench', 'http://' || :'host');
SELECT mesh.repository_register('octo/big', 'gh-bench');
SQL

# git_server NAME [NETNS-PID]: a git server on GPORT (in that namespace), its log in WORK/NAME.log
git_server() {
  python3 "$repos_dir/git_server.py" "$WORK/$1.port" "$GPORT" "$WORK/git" "$api" "$WORK/$1.log" ${2:+"$2"} &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$WORK/$1.port" ] && return 0; sleep 0.1; done
  echo "bench/checkout.sh: the git server $1 did not start" >&2; return 1
}
# run_ready RUN PROJECT: RUN of PROJECT, materialized (from the project's latest snapshot, when it
# has one), the git server in its sandbox, granted
run_ready() {
  local ref
  psql -X -qAt -c "SET client_min_messages = warning" \
    -c "SELECT 1 FROM mesh_acquire('$1', 'bench-agent', 'bench', project => '$2')" \
    -c "SELECT exit_code FROM mesh_exec('$1', ARRAY['true'])" \
    -c "SELECT mesh.repository_grant('$1', 'octo/big')" >/dev/null
  ref=$(psql -X -qAt -c "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'")
  git_server "$1" "$(jq -r .holder_pid "$PGHOST/data/mesh_sandboxd/workspaces/$ref/meta.json")"
}
# checkout_ms RUN: ms of mesh_checkout(RUN, 'octo/big'), timed by psql; fails unless it ended on HEAD
checkout_ms() {
  local out
  out=$(psql -X -qAt -c '\timing on' -c "SELECT commit_sha FROM mesh_checkout('$1', 'octo/big')" 2>/dev/null)
  grep -qx "$(git -C "$WORK/git/octo/big.git" rev-parse main)" <<<"$out" ||
    { echo "bench/checkout.sh: the checkout of $1 did not end on the repository's head" >&2; return 1; }
  sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out"
}
served_bytes() { awk 'NF == 4 { s += $4 } END { print s + 0 }' "$WORK/$1.log"; }
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# the baseline's password: the live token of RUN (superuser read), answered by GIT_ASKPASS
printf '#!/bin/sh\ncat "%s/token"\n' "$WORK" > "$WORK/askpass"; chmod 700 "$WORK/askpass"
host_clone_ms() {
  psql -X -qAt -c "SELECT token FROM mesh.repository_tokens WHERE run_id = '$1' AND revoked_at IS NULL" > "$WORK/token"
  rm -rf "$WORK/host-clone"
  local t0; t0=$(date +%s%N)
  GIT_ASKPASS="$WORK/askpass" GIT_TERMINAL_PROMPT=0 git -c credential.helper= clone -q \
    "http://x-access-token@127.0.0.1:$GPORT/octo/big.git" "$WORK/host-clone" ||
    { echo "bench/checkout.sh: the host's clone failed" >&2; return 1; }
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}

host=""; cold=""; warm=""; cold_bytes=""; warm_bytes=""
git_server host
for i in $(seq 1 "$ITER"); do
  # cold: a fresh clone, in a project of its own (no snapshot to start from); the baseline: git
  # on the host with the same token, from the same kind of server; then a snapshot of the
  # project holding the clone
  run_ready "cold-$i" "bench-proj-$i"
  cold="$cold $(checkout_ms "cold-$i")"
  cold_bytes="$cold_bytes $(served_bytes "cold-$i")"
  host="$host $(host_clone_ms "cold-$i")"
  psql -X -qAt -c "SELECT id FROM mesh_snapshot('cold-$i')" -c "SELECT mesh_release('cold-$i')" >/dev/null
  # one new commit upstream, then warm: the next run of the project fetches it
  echo "news $i" > "$WORK/src/NEWS"
  git -C "$WORK/src" add NEWS
  git -C "$WORK/src" -c user.name=b -c user.email=b@b commit -q -m "news $i"
  git -C "$WORK/src" push -q "$WORK/git/octo/big.git" main
  run_ready "warm-$i" "bench-proj-$i"
  warm="$warm $(checkout_ms "warm-$i")"
  warm_bytes="$warm_bytes $(served_bytes "warm-$i")"
  psql -X -qAt -c "SELECT mesh_release('warm-$i')" >/dev/null
done
rm -f "$WORK/token"
host_ms=$(median "$host"); cold_ms=$(median "$cold"); warm_ms=$(median "$warm")
echo "repository: $SIZE_MB MiB of incompressible files, $(du -sm "$WORK/git/octo/big.git" | cut -f1) MiB packed; $ITER iterations, medians"
echo "git clone on the host (baseline):          ${host_ms} ms"
echo "mesh_checkout cold (clone):                ${cold_ms} ms, $(median "$cold_bytes") bytes served"
echo "mesh_checkout warm (snapshot + fetch):     ${warm_ms} ms, $(median "$warm_bytes") bytes served"
awk -v c="$cold_ms" -v h="$host_ms" -v w="$warm_ms" 'BEGIN {
  printf "ratio  cold checkout / host clone:   %.2fx\n", c / h
  printf "ratio  warm checkout / cold:         %.3fx\n", w / c }'
