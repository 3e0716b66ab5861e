#!/usr/bin/env bash
# Output stored whole: 100 MB of stdout is stored and read back byte-identical through
# mesh_exec_output_bytes (and as text through mesh_exec_output), while mesh_exec returns the
# clamp; past mesh.exec_output_limit only the tail is kept and the row says how much went.
# A cluster of its own (the ceiling is a server setting).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
plan 9
dir=$(mktemp -d /tmp/mesh-output.XXXXXX); chmod 755 "$dir"
trap 'mesh_cluster_stop "$dir/pg"; rm -rf "$dir"' EXIT
mesh_cluster_start "$dir/pg" "mesh.exec_output_limit = '110MB'" >/dev/null || exit 1
mesh_wait_embedded "$dir/pg" && q "CREATE EXTENSION mesh_exec" >/dev/null && mesh_wait_workers || exit 1
run="whole-$RANDOM"
q "SELECT 1 FROM mesh_acquire('$run', 'whole-agent', 'wes')" >/dev/null

# seq's lines are all different: a lost, doubled or misplaced byte changes the digest
n=13500000
expected=$(seq 1 $n | md5sum | cut -d' ' -f1)
bytes=$(seq 1 $n | wc -c)
row=$(PGOPTIONS="-c client_min_messages=warning" q "SELECT exec_id || ' ' || truncated || ' ' || (length(stdout) < 200000)
                  FROM mesh_exec('$run', ARRAY['seq', '1', '$n'])")
read -r id truncated clamped <<<"$row"
is "$truncated $clamped" "true true" "mesh_exec returns the clamp of $bytes bytes"
is "$(q "SELECT stdout_bytes || ' ' || stdout_dropped FROM mesh.execs WHERE id = $id")" "$bytes 0" \
   "the exec row counts every byte, none dropped"
# read back the way a client polls: 16 MB at a time from the offset the last call returned
off=0; : > "$dir/back"
while [ "$off" -lt "$bytes" ]; do
  line=$(q "SELECT next_offset || ' ' || encode(data, 'hex') FROM mesh_exec_output_bytes($id, 'stdout', $off)")
  echo "${line#* }" | xxd -r -p >> "$dir/back"
  off=${line%% *}
done
is "$(md5sum < "$dir/back" | cut -d' ' -f1)" "$expected" "read back in pieces, the 100 MB are byte-identical"
is "$(q "SELECT md5(convert_to(string_agg(stdout, '' ORDER BY k), 'UTF8')) FROM (
           SELECT 1 AS k, stdout FROM mesh_exec_output($id, 0, 0, 60000000)
           UNION ALL SELECT 2, stdout FROM mesh_exec_output($id, 60000000, 0, 60000000)) p")" \
   "$expected" "and as text in two calls of mesh_exec_output"

# past the ceiling: the tail is kept, the head counted as dropped
q "ALTER SYSTEM SET mesh.exec_output_limit = '1MB'" >/dev/null
mesh_cluster_restart "$dir/pg" && mesh_wait_embedded "$dir/pg" && mesh_wait_workers || exit 1
id=$(q "SELECT exec_id FROM mesh_exec('$run', ARRAY['seq', '1', '300000'])")
is "$(q "SELECT stdout_bytes || ' ' || stdout_dropped FROM mesh.execs WHERE id = $id")" \
   "$(seq 1 300000 | wc -c) $(( $(seq 1 300000 | wc -c) - 1048576 ))" "past 1 MB the row says how many leading bytes were dropped"
is "$(q "SELECT md5(data) FROM mesh_exec_output_bytes($id)")" "$(seq 1 300000 | tail -c 1048576 | md5sum | cut -d' ' -f1)" \
   "the last 1 MB is kept byte-identical"
is "$(q "SELECT length(stdout) || ' ' || stdout_next || ' ' || left(stdout, 1) FROM mesh_exec_output($id)")" \
   "1048576 $(seq 1 300000 | wc -c) $(seq 1 300000 | tail -c 1048576 | head -c 1)" \
   "reading from offset 0 starts at the first kept byte"
is "$(q "SELECT truncated || ' ' || (stdout LIKE '%bytes omitted%') FROM mesh.execs WHERE id = $id")" "true true" \
   "the row keeps its clamp, marked"
is "$(q "SELECT count(*) FROM mesh.exec_output WHERE exec_id = $id AND octet_length(data) > 1048576")" 0 \
   "chunks are at most 1 MB"
q "SELECT mesh_release('$run')" >/dev/null
done_testing
