#!/usr/bin/env bash
# Chaos: four sessions run turns (declare, exec, write, read, release) while the embedded
# mesh-sandboxd, a mesh worker, a harness's psql and the postmaster are killed with SIGKILL at
# random moments (the postmaster restarted at once). Afterwards, within two sweeps: no row in
# a live state without its running sandbox, no sandbox without its row, no exec running, each
# agent's live count equal to what really runs, no holder on the host the daemon does not
# list. Then: the first call right after a start (state rebuilt) waits for the daemon instead
# of failing; a clean stop leaves nothing of the cluster on the host; so does an immediate one
# (the daemon hibernates its workspaces when the server goes; docs/sandboxd.md gives the bound).
# The kills' order and timing come from a seed, printed first; MESH_CHAOS_SEED=N replays it
# (the machine's own timing still varies); MESH_CHAOS_SECONDS sets the storm (default 30).
. "$(dirname "$0")/lib.sh"
plan 10
SEED=${MESH_CHAOS_SEED:-$(( ($(date +%s%N) / 1000) % 32768 ))}
STORM=${MESH_CHAOS_SECONDS:-30}
echo "# seed $SEED (replay: MESH_CHAOS_SEED=$SEED prove test/e2e/chaos.t)"
RANDOM=$SEED
tag="chaos$$x$SEED"   # run ids of this test alone, even when it runs twice on one cluster
out=$(mktemp -d)
chmod 755 "$out"
STATE="$PGDIR/data/mesh_sandboxd"
SOCK="$STATE/sandboxd.sock"
PG_CTL="$(pg_config --bindir)/pg_ctl"
as_pg() { if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
for k in 1 2 3 4; do q "SELECT 1 FROM mesh.agent_set_budget('chaos-a$k', max_concurrent_workspaces => 3)" >/dev/null; done

# one harness: turns until told to stop; it keeps at most two runs unreleased
session() {
  local k=$1 turn=0 run held=()
  RANDOM=$((SEED * 8 + k))
  export PGOPTIONS="-c statement_timeout=20s"
  while [ ! -e "$out/stop" ]; do  # psql's errors are expected while things die
    turn=$((turn + 1)); run="$tag-$k-$turn"
    psql -X -qAt -v ON_ERROR_STOP=1 >> "$out/s$k.log" 2>&1 <<SQL || sleep 0.2
SELECT 1 FROM mesh_acquire('$run', 'chaos-a$k', 'chaos');
SELECT exit_code FROM mesh_exec('$run', ARRAY['sh', '-c', 'echo turn $turn > t.txt']);
SELECT exit_code FROM mesh_exec('$run', ARRAY['sleep', '0.$((RANDOM % 8 + 1))']);
SELECT length(mesh_read_file('$run', 't.txt'));
SQL
    held+=("$run")
    if [ ${#held[@]} -gt 2 ] || [ $((RANDOM % 3)) -eq 0 ]; then
      psql -X -qAt -c "SELECT mesh_release('${held[0]}')" >> "$out/s$k.log" 2>&1
      held=("${held[@]:1}")
    fi
  done
}

detached_ms() {  # SHMID T0: ms from T0 until no process is attached to the old server's shared memory
  local n
  for _ in $(seq 1 500); do
    n=$(ipcs -m | awk -v id="$1" '$2 == id {print $6}')
    { [ -z "$n" ] || [ "$n" = 0 ]; } && break
    sleep 0.01
  done
  echo $(( $(now_ms) - $2 ))
}
restart_postmaster() {  # T0: start again at once, as an operator would; prints ms since T0
  local t0=$1 i
  for i in $(seq 1 300); do
    as_pg "$PG_CTL" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null 2>&1 && break
    sleep 0.1
  done
  echo $(( $(now_ms) - t0 ))
}

pids=()
for k in 1 2 3 4; do session "$k" 2>> "$out/s$k.log" & pids+=($!); done
end=$(( $(now_ms) + STORM * 1000 ))
pm_kills=0
kills=""
while [ "$(now_ms)" -lt "$end" ]; do
  sleep "$((RANDOM % 3 + 1)).$((RANDOM % 10))"
  what=$((RANDOM % 10))
  if [ "$what" -lt 3 ]; then
    pid=$(pgrep -u postgres -f "mesh-sandboxd --socket $SOCK" | head -1)
    [ -n "$pid" ] && kill -KILL "$pid" && kills+=" daemon"
  elif [ "$what" -lt 5 ]; then
    pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' ORDER BY random() LIMIT 1" 2>/dev/null)
    [ -n "$pid" ] && kill -KILL "$pid" && kills+=" worker"
  elif [ "$what" -lt 8 ]; then
    pid=$(pgrep -P "${pids[$((RANDOM % 4))]}" psql | head -1)
    [ -n "$pid" ] && kill -KILL "$pid" && kills+=" harness"
  elif [ "$pm_kills" -lt 2 ]; then
    pm_kills=$((pm_kills + 1))
    shmid=$(sed -n 7p "$PGDIR/data/postmaster.pid" | awk '{print $2}')
    t0=$(now_ms)
    kill -KILL "$(head -1 "$PGDIR/data/postmaster.pid")"
    echo "# postmaster SIGKILL: every process of it detached after $(detached_ms "$shmid" "$t0") ms;" \
         "pg_ctl start succeeded after $(restart_postmaster "$t0") ms"
    kills+=" postmaster"
  fi
done
touch "$out/stop"
wait "${pids[@]}"
echo "# kills:$kills"
echo "# turns: $(cat "$out"/s*.log | grep -c '^1$') declared; errors the harnesses saw, most frequent first:"
cat "$out"/s*.log | grep -E '^(ERROR|FATAL|psql):' | sed 's/"[^"]*"/"…"/g; s/[0-9]\+/N/g' | sort | uniq -c | sort -rn | head -6 | sed 's/^/#  /'

wait_server_ready; wait_daemon_ready
wait_for "SELECT count(*) = current_setting('mesh.workers')::int FROM pg_stat_activity WHERE backend_type = 'mesh worker'"

# what the daemon lists: "id state" lines; what runs on the host: one id per bwrap holder, by
# the directory its sandbox mounts (test/lib/holders.sh: an adopted standby shows its
# workspace; standbys no workspace took are counted apart, at most the pool's one)
listed() { curl -sf --max-time 10 --unix-socket "$SOCK" http://localhost/v1/workspaces | jq -r '.workspaces[] | "\(.id) \(.state)"' | sort; }
host_ids() { workspace_holder_names "$STATE" postgres; }
# every disagreement between rows, the daemon and the host, one line each
problems() {
  local l running
  l=$(listed) || { echo "the daemon does not answer"; return; }
  running=$(echo "$l" | awk '$2 == "running" {print $1}' | sort)
  printf '%s\n' "$running" | grep -v '^$' > "$out/running"
  echo "$l" | awk 'NF {print $1}' > "$out/listed"
  q "SELECT external_ref || ' ' || status FROM mesh.workspaces WHERE backend_kind = 'local'
       AND external_ref IS NOT NULL AND release_outcome IS DISTINCT FROM 'destroyed'" | sort > "$out/rows"
  awk '$2 ~ /^(acquiring|ready|releasing)$/ {print $1}' "$out/rows" | sort > "$out/live"
  comm -23 "$out/live" "$out/running" | sed 's/^/live row without a running sandbox: /'
  comm -13 "$out/live" "$out/running" | sed 's/^/running sandbox without a live row: /'
  comm -13 <(awk '{print $1}' "$out/rows" | sort) <(sort "$out/listed") | sed 's/^/sandbox without a row: /'
  [ "$(host_ids)" = "$(cat "$out/running")" ] || echo "host holders [$(host_ids | tr '\n' ' ')] differ from running [$(tr '\n' ' ' < "$out/running")]"
  [ "$(standby_holder_count "$STATE" postgres)" -le 1 ] || echo "more standby holders than the pool keeps: $(standby_holder_count "$STATE" postgres)"
  q "SELECT 'exec still running: ' || id FROM mesh.execs WHERE status = 'running'"
  q "SELECT format('agent %s: %s live, %s running', agent_id, count(*) FILTER (WHERE status IN ('acquiring', 'ready', 'releasing')),
                   count(*) FILTER (WHERE external_ref = ANY (string_to_array('$(tr '\n' ' ' < "$out/running" | sed 's/ $//')', ' '))))
       FROM mesh.workspaces WHERE agent_id LIKE 'chaos-%' GROUP BY agent_id
      HAVING count(*) FILTER (WHERE status IN ('acquiring', 'ready', 'releasing'))
          <> count(*) FILTER (WHERE external_ref = ANY (string_to_array('$(tr '\n' ' ' < "$out/running" | sed 's/ $//')', ' ')))"
}
sweeps=0
: > "$out/sweep1"
for s in 0 1 2; do   # 0: as the kills left it (the reaper's start-up sweep included)
  if [ "$s" -gt 0 ]; then
    q "SELECT action || ' ' || coalesce(run_id, '') || ' ' || coalesce(detail, '') FROM mesh.sweep() WHERE action <> 'reconciled'" > "$out/sweep$s"
  fi
  sweeps=$s
  [ -z "$(problems)" ] && break
done
echo "# converged after $sweeps sweep(s) of mesh.sweep(); actions of the first: $(awk '{print $1}' "$out/sweep1" | sort | uniq -c | tr -s ' \n' ' ')"
bad=$(problems)
[ -z "$bad" ] || echo "$bad" | head -20 | sed 's/^/# /'
is "$(echo "$bad" | grep -c 'live row without')" 0 "no live row without its running sandbox"
is "$(echo "$bad" | grep -cE 'running sandbox without|sandbox without a row')" 0 "no sandbox without its row"
is "$(echo "$bad" | grep -c 'exec still running')" 0 "no exec left running"
is "$(echo "$bad" | grep -c '^agent ')" 0 "every agent's live count equals what runs"
is "$(echo "$bad" | grep -c 'host holders')" 0 "nothing runs on the host that the daemon does not list"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE agent_id LIKE 'chaos-%' AND status = 'acquiring'")" 0 \
   "no row is left acquiring"

# the first call right after a start, with the daemon's state to rebuild, waits for it
as_pg "$PG_CTL" -D "$PGDIR/data" -w -t 60 -m fast stop >/dev/null
rm -rf "$STATE/base"
as_pg "$PG_CTL" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null
got=$(psql -X -qAt -c "SELECT 1 FROM mesh_acquire('$tag-first', 'chaos-first', 'chaos')" \
           -c "SELECT stdout FROM mesh_exec('$tag-first', ARRAY['echo', 'first'])" 2> "$out/first.err" | grep -x first)
is "$got" first "the first call after a start waits for the embedded daemon"
[ "$got" = first ] || sed 's/^/# /' "$out/first.err"

# a clean stop leaves nothing of the cluster on the host; an immediate one neither, within 5 s
cluster_procs() { pgrep -f "$PGDIR/" | grep -vx "$$" | while read -r p; do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null; echo; done | grep -v '^$'; }
psql -X -qAt -c "SELECT status FROM mesh_exec('$tag-first', ARRAY['sleep', '37'])" >/dev/null 2>&1 &
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = '$tag-first' AND status = 'running')"
as_pg "$PG_CTL" -D "$PGDIR/data" -w -t 60 -m fast stop >/dev/null
wait
left=$(cluster_procs)
is "$left" "" "a fast stop with an exec in flight leaves no process of the cluster"
as_pg "$PG_CTL" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null
wait_server_ready
psql -X -qAt -c "SELECT status FROM mesh_exec('$tag-first', ARRAY['sleep', '38'])" >/dev/null 2>&1 &
wait_for "SELECT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = '$tag-first' AND status = 'running')"
as_pg "$PG_CTL" -D "$PGDIR/data" -w -t 60 -m immediate stop >/dev/null
wait
for _ in $(seq 1 100); do [ -z "$(cluster_procs)" ] && break; sleep 0.1; done
left=$(cluster_procs)
is "$left" "" "an immediate stop: the daemon and its holders end (waited up to 10 s)"
[ -z "$left" ] || echo "$left" | head -5 | sed 's/^/# /'

# leave the cluster as the other tests expect it
as_pg "$PG_CTL" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null
wait_server_ready; wait_daemon_ready
wait_for "SELECT count(*) = current_setting('mesh.workers')::int FROM pg_stat_activity WHERE backend_type = 'mesh worker'"
q "SELECT count(mesh_release(run_id)) FROM mesh.workspaces WHERE run_id LIKE '$tag-%' AND status NOT IN ('released', 'failed')" >/dev/null 2>&1
ok $? "every chaos run releases afterwards"
rm -rf "$out"
done_testing
