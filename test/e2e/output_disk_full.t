#!/usr/bin/env bash
# Stored output cannot fill the disk PostgreSQL writes to.  A cluster of its own whose data
# directory (pg_wal included) is a 640 MB filesystem, with the default output bounds:
#  1. commands flooding incompressible output stop being stored at the install quota (a tenth
#     of the filesystem): each later exec is marked 'install quota', with an event and a
#     NOTICE, and runs to its end;
#  2. with the install quota lifted, storing stops at the free-space reserve instead;
#  3. afterwards PostgreSQL still accepts writes and its log has no PANIC; the filesystem
#     keeps free space.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to mount a small filesystem"
plan 12
dir=$(mktemp -d /tmp/mesh-diskfull.XXXXXX); chmod 755 "$dir"
mount -t tmpfs -o size=640m,mode=755 mesh-diskfull "$dir" || exit 1
trap 'mesh_cluster_stop "$dir/pg"; umount -l "$dir"; rmdir "$dir"' EXIT
# WAL is bounded so that checkpoints keep it small; the workspaces' own filesystem is small too
MESH_DISK_BYTES=134217728 mesh_cluster_start "$dir/pg" "mesh.embedded_sandboxd = on" \
  "max_wal_size = '64MB'" "min_wal_size = '32MB'" >/dev/null || exit 1
mesh_wait_embedded "$dir/pg" && q "CREATE EXTENSION mesh_exec" >/dev/null && mesh_wait_workers || exit 1

fs_bytes=$(df -B1 --output=size "$dir" | tail -1 | tr -d ' ')
free_bytes() { df -B1 --output=avail "$dir" | tail -1 | tr -d ' '; }
# 12 MB of random bytes as base64 (16 MB), which lz4 barely compresses
flood="head -c 12000000 /dev/urandom | base64 -w 0"
run="full-$RANDOM"
q "SELECT 1 FROM mesh_acquire('$run', 'full-agent', 'fay')" >/dev/null

# 1. the install quota (a tenth of 640 MB): a few floods reach it, the rest are marked
notices=0; stopped=
for i in $(seq 1 10); do
  out=$(psql -X -qAt -c "SELECT exec_id || ' ' || status FROM mesh_exec('$run', ARRAY['sh', '-c', '$flood'])" 2>&1)
  [[ "$out" == *"not all output"* ]] && notices=$((notices + 1))
  stopped=$(q "SELECT output_stopped FROM mesh.execs WHERE run_id = '$run' ORDER BY id DESC LIMIT 1")
  [ -n "$stopped" ] && [ "$notices" -ge 2 ] && break
done
is "$stopped" "install quota" "floods of output stop being stored at the install quota"
table=$(q "SELECT pg_total_relation_size('mesh.exec_output')")
[ "$table" -le $((fs_bytes / 10 + 17 * 1048576)) ]
ok $? "mesh.exec_output takes $table bytes: the quota ($((fs_bytes / 10))) and at most one command's chunk over"
[ "$notices" -ge 2 ]
ok $? "each caller whose output was cut heard a NOTICE ($notices)"
is "$(q "SELECT count(*) > 0 AND bool_and(status = 'ok') FROM mesh.execs WHERE run_id = '$run' AND output_stopped IS NOT NULL")" t \
   "the commands whose output was not stored ran to their end"
is "$(q "SELECT count(*) >= 1 FROM mesh.events WHERE kind = 'output_truncated' AND detail->>'reason' = 'install quota'")" t \
   "an output_truncated event says why"

# 2. no install quota: the free-space reserve is the last bound (a tenth of the filesystem, or
# twice max_wal_size: 128 MB here)
q "ALTER SYSTEM SET mesh.output_total_quota = 1000000" >/dev/null && q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT setting = '1000000' FROM pg_settings WHERE name = 'mesh.output_total_quota'"
sleep 1   # the workers take the reload at their next turn
run2="full2-$RANDOM"
q "SELECT 1 FROM mesh_acquire('$run2', 'full-agent', 'fay')" >/dev/null
for i in $(seq 1 40); do
  psql -X -qAt -c "SELECT 1 FROM mesh_exec('$run2', ARRAY['sh', '-c', '$flood'])" >/dev/null 2>&1
  stopped=$(q "SELECT output_stopped FROM mesh.execs WHERE run_id = '$run2' ORDER BY id DESC LIMIT 1")
  [ "$stopped" = "disk reserve" ] && break
done
is "$stopped" "disk reserve" "with the quota lifted, storing stops at the free-space reserve"
free=$(free_bytes)
[ "$free" -ge $((64 * 1048576)) ]
ok $? "the filesystem keeps $free bytes free (the reserve is 128 MB; at most one command's output went below it)"
table=$(q "SELECT pg_total_relation_size('mesh.exec_output')")
for i in 1 2 3; do psql -X -qAt -c "SELECT 1 FROM mesh_exec('$run2', ARRAY['sh', '-c', '$flood'])" >/dev/null 2>&1; done
[ "$(q "SELECT pg_total_relation_size('mesh.exec_output')")" -le $((table + 1048576)) ] && [ "$(free_bytes)" -ge $((64 * 1048576)) ]
ok $? "more floods store nothing more (pg_wal may still use its max_wal_size: $(free_bytes) bytes free)"

# 3. PostgreSQL is fine: writes, a checkpoint, and no PANIC
is "$(q "CREATE TABLE after_flood AS SELECT g, md5(g::text) FROM generate_series(1, 200000) g; SELECT count(*) FROM after_flood")" \
   200000 "PostgreSQL still accepts writes"
q "CHECKPOINT" >/dev/null
ok $? "and checkpoints"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id IN ('$run', '$run2') AND status = 'ok'")" \
   "$(q "SELECT count(*) FROM mesh.execs WHERE run_id IN ('$run', '$run2')")" "every command's row is recorded"
grep -qE 'PANIC|No space left on device' "$dir/pg/server.log"
ok $((1 - $?)) "the server log has no PANIC and no ENOSPC"
done_testing
