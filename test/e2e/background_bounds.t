#!/usr/bin/env bash
# Background commands have bounds that fail clearly, with the default settings: a run past
# mesh.settings.max_background_per_run is refused 53400 at start with a hint, nothing started
# and no row left; a worker past mesh.max_background_per_worker (lowered here) or near its
# open-files limit (lowered with prlimit) refuses 53000, and every other call, release
# included, keeps working (a call a worker has no descriptor at all for says so, 53000, never
# 08006); floods of output keep the workers' and the daemon's memory bounded, and a chatty
# command's stored output is whole and in order (it blocks on its pipe, it loses nothing); a
# run with many background commands is released.
. "$(dirname "$0")/lib.sh"
plan 28
tag=$((9100 + RANDOM % 800))   # a sleep length no other test uses: its processes are ours
run=bgb-$$

# err SQL -> "SQLSTATE: message" and the hint of the error SQL raised
err() { psql -X -qAt -v VERBOSITY=verbose -c "$1" 2>&1 | grep -E '^(ERROR|HINT)' | sed 's/^ERROR: *//' | tr '\n' ' '; }
sleeping() { pgrep -fc "^sleep $tag$"; }
wait_for_cmd() { for _ in $(seq 1 100); do eval "$1" && return 0; sleep 0.1; done; return 1; }
workers=$(q "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE backend_type = 'mesh worker'")
daemon=$(pgrep -f -- "--socket $PGDIR/data/mesh_sandboxd/sandboxd.sock")

# 1. the per-run bound
bound=$(q "SELECT max_background_per_run FROM mesh.settings")
is "$bound" 16 "the default per-run bound is 16"
q "SELECT 1 FROM mesh_acquire('$run', 'bgb-agent', 'bgb')" >/dev/null
is "$(q "SELECT count(mesh_exec_start('$run', ARRAY['sleep', '$tag'])) FROM generate_series(1, $bound)")" "$bound" \
   "a run starts $bound background commands"
e=$(err "SELECT mesh_exec_start('$run', ARRAY['sleep', '$tag'])")
[[ "$e" == "53400: run \"$run\" already has 16 background commands running"*"HINT:"*"max_background_per_run"* ]]
ok $? "one more is refused 53400 at start, with a hint naming the setting: $e"
is "$(q "SELECT count(*) || ' ' || count(*) FILTER (WHERE status = 'running') FROM mesh.execs WHERE run_id = '$run'")" \
   "$bound $bound" "the refused one left no row"
is "$(sleeping)" "$bound" "and started nothing on the backend"
id=$(q "SELECT min(id) FROM mesh.execs WHERE run_id = '$run'")
q "SELECT mesh_exec_kill($id, 'KILL')" >/dev/null
is "$(q "SELECT status FROM mesh_exec_wait($id, '30 seconds')")" killed "one of them killed and ended"
ok $([ -n "$(q "SELECT mesh_exec_start('$run', ARRAY['sleep', '$tag'])")" ]; echo $?) "makes room for one more"
e=$(err "SELECT * FROM mesh.set_policy(max_background_per_run => 0)")
[[ "$e" == "22023: max_background_per_run must be at least 1"* ]]
ok $? "a bound below 1 is refused: $e"

# 2. release of a run with many background commands
q "SELECT mesh_release('$run')" >/dev/null
ok $? "the run with $bound background commands running is released"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run' AND status = 'running'")" 0 "no row is left running"
wait_for_cmd '[ "$(sleeping)" -eq 0 ]'
ok $? "and no process of theirs is left"

# 3. the per-worker bound, lowered (it is a reload setting); other runs' commands may share
#    the worker: those running now are allowed for
live=$(q "SELECT count(*) FROM mesh.execs WHERE background AND status = 'running'")
per_worker=$((live + 2))
q "ALTER SYSTEM SET mesh.max_background_per_worker = $per_worker" >/dev/null && q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT setting = '$per_worker' FROM pg_settings WHERE name = 'mesh.max_background_per_worker'"
sleep 1   # the workers take the reload at their next turn
run2=$run-w
q "SELECT 1 FROM mesh_acquire('$run2', 'bgb-agent', 'bgb')" >/dev/null
admitted=0; e=""
for _ in $(seq 1 $((per_worker + 1))); do
  e=$(err "SELECT mesh_exec_start('$run2', ARRAY['sleep', '$tag'])")
  [ -n "$e" ] && break
  admitted=$((admitted + 1))
done
[[ "$e" == "53000: mesh worker "*" already follows $per_worker background commands"*"HINT:"*"mesh.max_background_per_worker"* ]]
ok $? "past mesh.max_background_per_worker a start is refused 53000 with a hint: $e"
ok $([ "$admitted" -ge 2 ]; echo $?) "after $admitted were admitted"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run2'")" "$admitted" "the refused one left no row"
is "$(q "SELECT stdout FROM mesh_exec('$run2', ARRAY['echo', 'still here'])")" "still here" \
   "an ordinary command of the same run still runs"
q "ALTER SYSTEM RESET mesh.max_background_per_worker" >/dev/null && q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT setting = '256' FROM pg_settings WHERE name = 'mesh.max_background_per_worker'"
sleep 1
ok $([ -n "$(q "SELECT mesh_exec_start('$run2', ARRAY['sleep', '$tag'])")" ]; echo $?) \
   "with the bound back to its default (256) it starts"
q "SELECT mesh_release('$run2')" >/dev/null

# 4. a worker near its open-files limit (lowered on the running workers) refuses new
#    background commands, and every other call keeps working
# as the workers' own user: lowering a soft limit needs no privilege, another user's one does
as_owner() { runuser -u "$(stat -c %U "/proc/$1")" -- prlimit --pid "$@"; }
declare -A soft hard
for p in $workers; do
  soft[$p]=$(as_owner "$p" --nofile --noheadings --output SOFT --raw)
  hard[$p]=$(as_owner "$p" --nofile --noheadings --output HARD --raw)
  # within the reserve for the other calls (mesh.worker_max_calls, 128; curl's 64 idle
  # connections; 32), yet far from what the calls below need
  as_owner "$p" --nofile=$(( $(ls "/proc/$p/fd" | wc -l) + 128 + 64 + 32 - 8 )):"${hard[$p]}"
done
run3=$run-fd
q "SELECT 1 FROM mesh_acquire('$run3', 'bgb-agent', 'bgb')" >/dev/null
e=""
for _ in $(seq 1 12); do
  e=$(err "SELECT mesh_exec_start('$run3', ARRAY['sleep', '$tag'])")
  [ -n "$e" ] && break
done
[[ "$e" == "53000: mesh worker "*" is near its open-files limit"*"HINT:"*"open-files limit"* ]]
ok $? "a worker near its open-files limit refuses a background command 53000 with a hint: $e"
is "$(q "SELECT stdout FROM mesh_exec('$run3', ARRAY['echo', 'still here'])")" "still here" \
   "an ordinary command still runs"
q "SELECT 1 FROM mesh_write_file('$run3', 'f.txt', 'kept')" >/dev/null
is "$(q "SELECT convert_from(mesh_read_file('$run3', 'f.txt'), 'UTF8')")" kept "files are still written and read"
q "SELECT mesh_release('$run3')" >/dev/null
ok $? "and the run is released"
# a worker with no descriptor left at all says so (53000), not that the backend is unreachable
run5=$run-nofd
q "SELECT 1 FROM mesh_acquire('$run5', 'bgb-agent', 'bgb')" >/dev/null
q "SELECT mesh_exec('$run5', ARRAY['true'])" >/dev/null
sockets=0
for p in $workers; do
  as_owner "$p" --nofile=$(( $(ls "/proc/$p/fd" | wc -l) + 1 )):"${hard[$p]}"
  n=$(find "/proc/$p/fd" -lname 'socket:*' | wc -l); [ "$n" -gt "$sockets" ] && sockets=$n
done
# at once, more than the worker's sockets (its idle connections among them): some need new ones
for i in $(seq 1 $((sockets + 4))); do
  psql -X -qAt -v VERBOSITY=verbose -c "SELECT mesh_exec('$run5', ARRAY['sleep', '1'])" > "/tmp/bgb-$$-$i" 2>&1 &
done
wait
outcomes=$(cat /tmp/bgb-$$-* | grep -E '^ERROR' | sort | uniq -c); rm -f /tmp/bgb-$$-*
[[ "$outcomes" == *"53000: backend \"local\" was not called: the mesh worker has no descriptor left"* &&
   "$outcomes" != *08006* ]]
ok $? "calls a worker has no descriptor for fail 53000 saying so, none 08006: $(echo $outcomes)"
for p in $workers; do as_owner "$p" --nofile="${soft[$p]}":"${hard[$p]}"; done
is "$(q "SELECT stdout FROM mesh_exec('$run5', ARRAY['echo', 'back'])")" back "with descriptors back, calls run again"
q "SELECT mesh_release('$run5')" >/dev/null

# 5. floods: 15 commands writing as fast as they can and a chatty one whose output is checked,
#    in one run; the workers' and the daemon's peak memory stays bounded
run4=$run-flood
q "SELECT 1 FROM mesh_acquire('$run4', 'bgb-agent', 'bgb')" >/dev/null
q "SELECT mesh_exec('$run4', ARRAY['true'])" >/dev/null
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
for p in $workers $daemon; do echo 5 > "/proc/$p/clear_refs"; done
before=0; for p in $workers $daemon; do before=$((before + $(kib "$p" VmRSS))); done
q "SELECT count(mesh_exec_start('$run4', ARRAY['yes', 'flood $tag'])) FROM generate_series(1, 15)" >/dev/null
lines=2000000
chatty=$(q "SELECT mesh_exec_start('$run4', ARRAY['seq', '1', '$lines'])")
is "$(q "SELECT status FROM mesh_exec_wait($chatty, '300 seconds')")" ok "the chatty command ran to its end among the floods"
is "$(q "SELECT md5(data) FROM mesh_exec_output_bytes($chatty)")" "$(seq 1 $lines | md5sum | cut -d' ' -f1)" \
   "its $(seq 1 $lines | wc -c) bytes are stored whole and in order"
wait_for "SELECT min(stdout_bytes) > 16 * 1024 * 1024 FROM mesh.execs WHERE run_id = '$run4' AND argv[1] = 'yes'" 600
ok $? "each flood had more than 16 MiB stored meanwhile"
peak=0; for p in $workers $daemon; do peak=$((peak + $(kib "$p" VmHWM))); done
growth=$(( (peak - before) / 1024 ))
echo "# workers + daemon: +$growth MiB at peak"
ok $([ "$growth" -le 256 ]; echo $?) \
   "the workers' and the daemon's peak memory grew by $growth MiB, under 256 MiB, for 15 floods"
q "SELECT mesh_release('$run4')" >/dev/null
ok $? "the run with the floods is released"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run4' AND status = 'running'")" 0 "no row is left running"
done_testing
