#!/usr/bin/env bash
# Nothing grows without bound: after a warm-up, a soak of harness turns (each on a
# fresh run: acquire, write, three execs, read back, release) must leave every mesh
# background worker's memory (its memory contexts and its anonymous RSS, which holds
# what jansson and libcurl malloc), its descriptors, the embedded daemon's memory and
# descriptors, the broker directories and the sandbox holders where they were.
# The bounds are per-turn rates far below one leaked object per turn.
. "$(dirname "$0")/lib.sh"
LIB=$(cd "$(dirname "$0")/../lib" && pwd)
TURNS=${MESH_SOAK_TURNS:-1200}          # measured turns, spread over 4 clients
CLIENTS=4
plan 8
out=$(mktemp -d)
agent=soak-$$
export PGOPTIONS="-c client_min_messages=warning"
psql -X -q -v ON_ERROR_STOP=1 -f "$LIB/turn.sql" || exit 1

turns() {  # turns N: N harness turns over $CLIENTS pgbench clients
  pgbench -n -M extended -f "$LIB/turn.pgbench" -D agent="$agent" -c $CLIENTS -j $CLIENTS \
    -t $(($1 / CLIENTS)) > "$out/pgbench.out" 2> "$out/pgbench.err"
}

# memory contexts in use by process $1, as it logs them (pg_log_backend_memory_contexts)
contexts_used() {
  local pid=$1 log="$PGDIR/server.log" n
  n=$(grep -c "\[$pid\] .*Grand total" "$log")
  q "SELECT pg_log_backend_memory_contexts($pid)" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(grep -c "\[$pid\] .*Grand total" "$log")" -gt "$n" ] && break
    sleep 0.1
  done
  grep "\[$pid\] .*Grand total" "$log" | tail -1 | sed -E 's/.*; ([0-9]+) used.*/\1/'
}
anon_kb() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
daemon_pid() { pgrep -f "^mesh-sandboxd .*$PGDIR/data/" | head -1; }
# holders and broker directories of workspaces; the standby pool's (test/lib/holders.sh) are
# not per-turn growth, and a leaked standby would show as a workspace's or as a second standby
holders() { workspace_holder_names "$PGDIR/data/mesh_sandboxd" | wc -l; }
broker_dirs() { find "$PGDIR/data/mesh_broker" -mindepth 1 -maxdepth 1 ! -name '_standby-*' | wc -l; }

# one line per process: name pid contexts anon_kb fds
snapshot() {
  q "SELECT backend_type || ':' || pid FROM pg_stat_activity WHERE backend_type IN ('mesh worker', 'mesh broker', 'mesh reaper') ORDER BY 1" |
  while IFS=: read -r name pid; do
    echo "${name// /_} $pid $(contexts_used "$pid") $(anon_kb "$pid") $(fds "$pid")"
  done
  d=$(daemon_pid)
  echo "mesh-sandboxd $d 0 $(anon_kb "$d") $(fds "$d")"
}

turns 600                                # warm-up: plans, caches, connections, the malloc heap's high-water mark
ok $? "warm-up turns ran"
before_dirs=$(broker_dirs); before_holders=$(holders)
snapshot > "$out/before"
turns "$TURNS"
ok $? "$TURNS turns ran without an error"
grep -m3 -E 'aborted|ERROR' "$out/pgbench.err" | sed 's/^/#   /'
snapshot > "$out/after"

# growth per process between two snapshots ($1, $2), against per-turn bounds: contexts
# 16 B (plus 128 kB for plans cached once, e.g. of an error path the warm-up did not take),
# anonymous memory 512 B (the daemon 1 kB), descriptors 8 in all.  Before these were
# fixed, each worker grew by about 1 kB of contexts and 2 kB of anonymous memory per turn.
growth() {   # growth BEFORE AFTER TURNS-BETWEEN
  join <(sort -k2 "$1" | awk '{print $2, $1, $3, $4, $5}' | sort) \
       <(sort -k2 "$2" | awk '{print $2, $3, $4, $5}' | sort) |
  awk -v t="$3" '{
    ctx = $6 - $3; anon = $7 - $4; fd = $8 - $5
    anon_bound = ($2 == "mesh-sandboxd") ? t * 1024 / 1024 : t * 512 / 1024
    bad = (ctx > 131072 + t * 16) || (anon > anon_bound) || (fd > 8)
    printf "%s%s pid %s: contexts %+d B, anonymous %+d kB, descriptors %+d over %d turns\n",
           bad ? "BAD " : "", $2, $1, ctx, anon, fd, t }'
}
growth=$(growth "$out/before" "$out/after" "$TURNS")
echo "$growth" | sed 's/^/# /'
# A worker's malloc heap can still be settling towards its high-water mark after the
# warm-up, more so after the big outputs of the tests before this one (glibc raises its
# mmap threshold after freeing a large block, so later large blocks come from the heap).
# A leak grows again in a second window of as many turns; a settling heap does not (it
# settles once, and with two workers it may settle in the one that did not in the first
# window): a process over its bounds is judged on both windows together, against the same
# per-turn bounds over twice the turns, so a one-time step of under a turn-window's bound
# passes and a steady growth over the bounds fails as before.
if echo "$growth" | grep -q '^BAD'; then
  turns "$TURNS"
  snapshot > "$out/again"
  echo "# over the bounds: the second window of $TURNS turns"
  growth "$out/after" "$out/again" "$TURNS" | sed 's/^/# /'
  growth=$(growth "$out/before" "$out/again" $((2 * TURNS)))
  echo "# judged on both windows, $((2 * TURNS)) turns" 
  echo "$growth" | sed 's/^/# /'
fi
is "$(echo "$growth" | grep -c '^BAD')" 0 \
   "no mesh worker, broker, reaper or the daemon grows per turn (memory contexts, anonymous memory, descriptors)"
is "$(q "SELECT count(*) FROM mesh.workspaces WHERE agent_id = '$agent' AND status <> 'released'")" 0 "every soak workspace was released"
is "$(broker_dirs)" "$before_dirs" "no broker directory is left per workspace"
is "$(holders)" "$before_holders" "no sandbox holder is left per workspace"
ok "$([ "$(standby_holder_count "$PGDIR/data/mesh_sandboxd")" -le 1 ]; echo $?)" "no standby holder beyond the pool's one"
# a harness session's own backend: calls that succeed, fail in the backend, or are refused
# as bad input leave nothing behind either (jansson's memory is not the query's)
session=$(psql -X -qAt -v ON_ERROR_STOP=1 2>&1 <<SQL
SET client_min_messages = warning;
SELECT 1 FROM mesh_acquire('$agent-session', '$agent', 'soak') \\g /dev/null
CREATE FUNCTION pg_temp.calls(n int) RETURNS int LANGUAGE plpgsql AS \$\$
DECLARE failed int := 0;
BEGIN
  FOR i IN 1..n LOOP
    PERFORM mesh_exec('$agent-session', ARRAY['true']);
    BEGIN PERFORM mesh_read_file('$agent-session', 'no-such-file'); EXCEPTION WHEN undefined_file THEN failed := failed + 1; END;
    BEGIN PERFORM mesh_exec('$agent-session', ARRAY['true'], env => '{"A": 1}'); EXCEPTION WHEN invalid_parameter_value THEN failed := failed + 1; END;
  END LOOP;
  RETURN failed;
END \$\$;
CREATE FUNCTION pg_temp.anon_kb() RETURNS bigint LANGUAGE sql AS
  \$\$ SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'RssAnon:\\s+(\\d+)'))[1]::bigint \$\$;
SELECT pg_temp.calls(200) \\g /dev/null
SELECT pg_temp.anon_kb() AS before \\gset
SELECT pg_temp.calls(400) AS failed, pg_temp.anon_kb() - :before AS grown;
SELECT mesh_release('$agent-session') \\g /dev/null
SQL
)
echo "# harness session, 400 x (exec, failed read, refused input): failed|grown kB = $session"
ok "$(echo "$session" | awk -F'|' '{ exit !($1 == 800 && $2 <= 96) }'; echo $?)" \
   "a harness session's backend does not grow per call, failed or refused ones included"
q "DROP FUNCTION mesh_turn_expect(text, text, text)" >/dev/null
rm -rf "$out"
done_testing
