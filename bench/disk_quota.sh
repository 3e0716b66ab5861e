#!/usr/bin/env bash
# bench/disk_quota.sh: what per-workspace disk quotas cost (issue 28), measured in one run on
# the embedded daemon's set-up (mesh-sandboxd as postgres after --setup-host), against the same
# daemon on the same btrfs filesystem without them (host.json without its quota record: files in
# a plain directory, not a quota slot).
#
#   sudo bench/disk_quota.sh [ITERATIONS]      (default 40)
#
# Runs with quotas, without, then with again (the order shows what drift there is).
# Rows: create = PUT of a new workspace (no standby: the holder starts in the call), p50 ms;
# release = its DELETE (destroy), p50 ms; write = MB/s of a 64 MiB dd with fsync inside a
# workspace (median of 5). Also the --setup-host time, quota slots included.
set -o pipefail   # not -e: the test library's helpers test and fail on purpose
cd "$(dirname "$0")/.."
ITER=${1:-40}
. test/sandboxd/lib.sh
MiB=$((1 << 20))

# p50 of the numbers on stdin
p50() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
now_ms() { date +%s%N | awk '{printf "%.3f\n", $1 / 1e6}'; }

# measure LABEL: create/release timings and write throughput on the running daemon, after a
# few untimed rounds (a fresh filesystem commits its set-up in the background meanwhile)
measure() {
  local i t0 t1 rates=()
  for i in 1 2 3 4 5; do api PUT "/v1/workspaces/warm$i" '{"size":"small"}' > /dev/null; done
  for i in 1 2 3 4 5; do api DELETE "/v1/workspaces/warm$i" > /dev/null; done
  : > "$SD_DIR/create"; : > "$SD_DIR/release"
  for i in $(seq 1 "$ITER"); do
    t0=$(now_ms); api PUT "/v1/workspaces/b$i" '{"size":"small"}' > /dev/null; t1=$(now_ms)
    echo "$t1 - $t0" | bc >> "$SD_DIR/create"
  done
  for i in $(seq 1 5); do
    r=$(run_sh b1 'rm -f w; dd if=/dev/zero of=w bs=1M count=64 conv=fsync 2>&1 | tail -1')
    rates+=("$(stdout_of "$r" | awk '{v=$(NF-1); u=$NF; if (u ~ /^GB/) v*=1000; print v}')")
  done
  for i in $(seq 1 "$ITER"); do
    t0=$(now_ms); api DELETE "/v1/workspaces/b$i" > /dev/null; t1=$(now_ms)
    echo "$t1 - $t0" | bc >> "$SD_DIR/release"
  done
  printf "%-14s create %7.1f ms   release %7.1f ms   write %6s MB/s\n" "$1" \
    "$(p50 < "$SD_DIR/create")" "$(p50 < "$SD_DIR/release")" \
    "$(printf '%s\n' "${rates[@]}" | p50)"
}

sd_prepare_as postgres --standby 0
CG="mesh-bench-$$-$RANDOM"; SD_CGROUPS+=("$CG")
t0=$(now_ms)
"$SANDBOXD" --setup-host postgres --state-dir "$SD_STATE" --cgroup-name "$CG" \
    --disk-bytes $((1024 * MiB)) > "$SD_DIR/setup.out"
t1=$(now_ms)
echo "setup-host (1 GiB btrfs image, 4 tiers x 128 quota slots): $(echo "$t1 - $t0" | bc) ms"
sd_launch_as postgres
[ "$(field "$(api GET /v1/capabilities)" .capabilities.disk_quota)" = true ] || { echo "no disk quotas here"; exit 1; }
measure "with quotas"
sd_stop TERM
cp "$SD_STATE/host.json" "$SD_DIR/host-quota.json"
jq 'del(.disk_quota, .quota_slots)' "$SD_DIR/host-quota.json" > "$SD_STATE/host.json"
sd_launch_as postgres
[ "$(field "$(api GET /v1/capabilities)" .capabilities.disk_quota)" = false ] || { echo "quotas still on"; exit 1; }
measure "without"
sd_stop TERM
cp "$SD_DIR/host-quota.json" "$SD_STATE/host.json"
sd_launch_as postgres
measure "with (again)"
