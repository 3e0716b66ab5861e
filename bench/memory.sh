#!/usr/bin/env bash
# bench/memory.sh: what moving bytes through mesh costs in memory, measured in one run.
#
#   sudo bench/memory.sh [MIB]
#
# For a write, a stdin and a read of MIB MiB (default 16), the peak resident memory each
# process gains: the calling backend (minus what building the same argument costs it
# without mesh, measured in the same run) and the worker; both include the call's shared
# memory segment they map.  Peaks are reset through /proc/PID/clear_refs (root), so a
# figure is the growth over what the process already held.  Then a 250 MB stdin, refused
# before the hand-off: the caller pays only for the argument PostgreSQL built.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${1:-16}
. bench/lib.sh
bench_cluster 1
psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-mem', 'bench', 'bench')" \
             -c "SELECT exit_code FROM mesh_exec('bench-mem', ARRAY['true'])" >/dev/null 2>&1
worker=$(psql -X -qAt -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker'")

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }

# caller_growth SQL: KiB the calling backend's peak grows while running SQL
caller_growth() {
  psql -X -qAt 2>&1 <<SQL | awk '/^rss0/ {r=$2} /^hwm/ {h=$2} END {print h-r}'
SELECT pg_backend_pid() AS pid \gset
\setenv PID :pid
\! echo 5 > /proc/\$PID/clear_refs; awk '\$1 == "VmRSS:" {print "rss0", \$2}' /proc/\$PID/status
\o /dev/null
$1
\o
\! awk '\$1 == "VmHWM:" {print "hwm", \$2}' /proc/\$PID/status
SQL
}

# measure LABEL ARG CALL: the caller's growth for CALL minus that of building ARG alone
measure() {
  local alone call w0 w
  alone=$(caller_growth "SELECT length($2);")
  echo 5 > "/proc/$worker/clear_refs"; w0=$(kib "$worker" VmRSS)
  call=$(caller_growth "$3")
  w=$(( $(kib "$worker" VmHWM) - w0 ))
  awk -v l="$1" -v a="$alone" -v c="$call" -v w="$w" -v m="$MIB" 'BEGIN {
    printf "%-22s caller +%6.1f MiB (%.1fx)   worker +%6.1f MiB (%.1fx)\n", l, (c-a)/1024, (c-a)/1024/m, w/1024, w/1024/m }'
}

arg="decode(repeat('a', $MIB * 1024 * 1024), 'escape')"
psql -X -q -c "SET mesh.max_file_size = '512MB'" >/dev/null
echo "moving $MIB MiB (growth of peak resident memory; ratio to the payload)"
measure "mesh_write_file" "$arg" "SET mesh.max_file_size = '512MB'; SELECT mesh_write_file('bench-mem', 'big', $arg);"
measure "mesh_exec stdin" "$arg" "SET mesh.max_stdin_size = '512MB'; SELECT stdout FROM mesh_exec('bench-mem', ARRAY['wc', '-c'], stdin => $arg);"
measure "mesh_read_file" "''::bytea" "SET mesh.max_file_size = '512MB'; SELECT length(mesh_read_file('bench-mem', 'big'));"

big="decode(repeat('a', 250000000), 'escape')"
alone=$(caller_growth "SELECT length($big);")
call=$(caller_growth "SELECT stdout FROM mesh_exec('bench-mem', ARRAY['wc', '-c'], stdin => $big);")
awk -v a="$alone" -v c="$call" 'BEGIN {
  printf "250 MB stdin, refused: caller +%.1f MiB over building the argument (%.0f MiB, PostgreSQL'"'"'s own)\n", (c-a)/1024, a/1024 }'
psql -X -qAt -c "SELECT mesh_release('bench-mem')" >/dev/null
