#!/usr/bin/env bash
# Background commands on the default path (the embedded daemon): mesh_exec_start returns while
# the command runs on across calls; another command talks to it; mesh_exec_kill ends it and its
# children; release ends all of them; a LISTENing client (psycopg2, a real driver) sees a line
# printed every 100 ms as it comes; 100 MB of output is stored whole; bad input gets clear
# answers; a worker SIGKILL leaves a truthful row after the restart.
. "$(dirname "$0")/lib.sh"
plan 29
run=bg-$$
tag=$((7000 + RANDOM % 2000))   # a sleep length no other test uses: its processes are ours
PY=/usr/bin/python3             # Debian's python, where python3-psycopg2 lives

q "SELECT 1 FROM mesh_acquire('$run', 'bg-agent', 'bea')" >/dev/null

# 1. a server keeps running across calls, and a second command talks to it
id=$(q "SELECT mesh_exec_start('$run', ARRAY['python3', '-u', '-m', 'http.server', '8123', '--bind', '127.0.0.1'])")
ok $? "mesh_exec_start returns at once with exec id $id"
is "$(q "SELECT status || ' ' || background FROM mesh.execs WHERE id = $id")" "running true" \
   "its row is running, marked background"
wait_for "SELECT o.stdout LIKE '%Serving HTTP%' FROM mesh_exec_output($id) o"
ok $? "its output arrives while it runs (the server's banner)"
q "SELECT 1 FROM mesh_write_file('$run', 'hello.txt', 'hi from the workspace')" >/dev/null
got=$(q "SELECT stdout FROM mesh_exec('$run', ARRAY['python3', '-c',
          'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8123/hello.txt\").read().decode())'])")
is "$got" "hi from the workspace" "a second command in the same workspace talks to it"
is "$(q "SELECT status FROM mesh.execs WHERE id = $id")" "running" "and it is still running after that call"

# 2. mesh_exec_kill signals the whole tree: the TERM reaches children too
id2=$(q "SELECT mesh_exec_start('$run', ARRAY['sh', '-c', 'sleep $tag & sleep $tag & echo started; wait'])")
wait_for "SELECT stdout LIKE 'started%' FROM mesh_exec_output($id2)"
ok $? "a command with two children runs"
ok $([ "$(pgrep -fc "^sleep $tag$")" -ge 2 ]; echo $?) "its children are there ($(pgrep -fc "^sleep $tag$"))"
is "$(q "SELECT mesh_exec_kill($id2)")" "t" "mesh_exec_kill(TERM) signals it"
is "$(q "SELECT status FROM mesh_exec_wait($id2, '30 seconds')")" "killed" "mesh_exec_wait returns its end: killed"
wait_for_cmd() { for _ in $(seq 1 100); do eval "$1" && return 0; sleep 0.1; done; return 1; }
wait_for_cmd "[ \"\$(pgrep -fc '^sleep $tag\$')\" -eq 0 ]"
ok $? "no child of it is left"
is "$(q "SELECT count(*) FROM mesh.events WHERE kind = 'exec_signalled' AND (detail->>'exec_id')::bigint = $id2
           AND detail->>'signal' = 'TERM'")" "1" "the kill is recorded as an event"
notice=$(psql -X -qAt -c "SELECT mesh_exec_kill($id2)" 2>&1)
[[ "$notice" == *"already ended (killed)"*"f" ]]
ok $? "a kill of a finished command is a clear answer, not an error: $(echo $notice)"

# 3. a LISTENing client sees each line within the interval, line by line
cat > /tmp/bg-listen-$$.py <<'EOF'
import json, select, sys, time
import psycopg2, psycopg2.extensions
run = sys.argv[1]
conn = psycopg2.connect("")
conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
cur = conn.cursor()
cur.execute("SELECT mesh_exec_start(%s, ARRAY['sh', '-c', "
            "'for i in $(seq 1 20); do echo \"line $i $(date +%%s.%%N)\"; sleep 0.1; done'])", (run,))
exec_id = cur.fetchone()[0]
cur.execute("SELECT mesh_exec_channel(%s)", (exec_id,))
cur.execute('LISTEN "%s"' % cur.fetchone()[0])
off, seen, wakeups, lag = 0, [], 0, []
end = None
while end is None:
    if select.select([conn], [], [], 30) == ([], [], []):
        break
    conn.poll()
    while conn.notifies:
        n = conn.notifies.pop(0)
        payload = json.loads(n.payload)
        if "status" in payload:
            end = payload
    wakeups += 1
    cur.execute("SELECT stdout, stdout_next FROM mesh_exec_output(%s, %s)", (exec_id, off))
    text, off = cur.fetchone()
    now = time.time()
    for line in text.splitlines():
        seen.append(line.split()[1])
        lag.append(now - float(line.split()[2]))
print(json.dumps({"seen": seen, "wakeups": wakeups, "end": end,
                  "max_lag_ms": round(max(lag) * 1000) if lag else None}))
EOF
res=$($PY /tmp/bg-listen-$$.py "$run" 2>&1)
rm -f /tmp/bg-listen-$$.py
echo "# listener: $res"
is "$(echo "$res" | jq -c '.seen')" "$(seq 1 20 | jq -sc 'map(tostring)')" "the listener read all 20 lines, in order"
ok $([ "$(echo "$res" | jq '.wakeups')" -ge 10 ]; echo $?) \
   "line by line: $(echo "$res" | jq '.wakeups') notifications, not one at the end"
is "$(echo "$res" | jq -r '.end.status + " " + (.end.exit_code|tostring)')" "ok 0" \
   "the last notification carries the status and exit code"

# 3b. a flood of output: the NOTIFYs are rate bounded, the stored output loses nothing
cat > /tmp/bg-flood-$$.py <<'EOF'
import json, select, sys
import psycopg2, psycopg2.extensions
run = sys.argv[1]
conn = psycopg2.connect("")
conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
cur = conn.cursor()
cur.execute("SELECT setting::float FROM pg_settings WHERE name = 'mesh.exec_notify_interval'")
interval_ms = cur.fetchone()[0]
# 20 000 lines as fast as the shell writes them, each its own write
cur.execute("SELECT mesh_exec_start(%s, ARRAY['sh', '-c', "
            "'i=0; while [ $i -lt 20000 ]; do echo \"line $i\"; i=$((i+1)); done'])", (run,))
exec_id = cur.fetchone()[0]
cur.execute("SELECT mesh_exec_channel(%s)", (exec_id,))
cur.execute('LISTEN "%s"' % cur.fetchone()[0])
notifies, ended = 0, False
while not ended:
    if select.select([conn], [], [], 60) == ([], [], []):
        break
    conn.poll()
    while conn.notifies:
        notifies += 1
        ended = ended or "status" in json.loads(conn.notifies.pop(0).payload)
cur.execute("SELECT extract(epoch FROM finished_at - started_at)::float FROM mesh.execs WHERE id = %s", (exec_id,))
wall = cur.fetchone()[0]
# one step per interval at most, each with a NOTIFY per stream, and the last one
print(json.dumps({"exec_id": exec_id, "notifies": notifies,
                  "bound": 2 * (wall * 1000 / interval_ms + 2) + 1}))
EOF
res=$($PY /tmp/bg-flood-$$.py "$run" 2>&1); rm -f /tmp/bg-flood-$$.py
echo "# flood: $res"
ok $(echo "$res" | jq -e '.notifies <= .bound' >/dev/null; echo $?) \
   "$(echo "$res" | jq -r '.notifies') NOTIFYs for 20 000 writes: within the rate bound ($(echo "$res" | jq -r '.bound|floor'))"
fid=$(echo "$res" | jq -r '.exec_id')
is "$(q "SELECT md5(data) FROM mesh_exec_output_bytes($fid)")" \
   "$(i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done | md5sum | cut -d' ' -f1)" \
   "and the stored output has every line"

# 4. output stored whole: 100 MB read back byte-identical (the ceiling raised past it a while)
q "ALTER SYSTEM SET mesh.exec_output_limit = '110MB'" >/dev/null && q "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT setting = '115343360' FROM pg_settings WHERE name = 'mesh.exec_output_limit'"
sleep 1   # the workers take the reload at their next turn
n=13500000
id3=$(q "SELECT mesh_exec_start('$run', ARRAY['seq', '1', '$n'])")
is "$(q "SELECT status || ' ' || truncated FROM mesh_exec_wait($id3)")" "ok true" \
   "a background command's 100 MB end as mesh_exec's row does, clamped"
off=0; bytes=$(seq 1 $n | wc -c); : > /tmp/bg-back-$$
while [ "$off" -lt "$bytes" ]; do
  line=$(q "SELECT next_offset || ' ' || encode(data, 'hex') FROM mesh_exec_output_bytes($id3, 'stdout', $off)")
  echo "${line#* }" | xxd -r -p >> /tmp/bg-back-$$
  off=${line%% *}
done
is "$(md5sum < /tmp/bg-back-$$ | cut -d' ' -f1)" "$(seq 1 $n | md5sum | cut -d' ' -f1)" \
   "the 100 MB are stored whole and read back byte-identical"
rm -f /tmp/bg-back-$$
q "ALTER SYSTEM RESET mesh.exec_output_limit" >/dev/null && q "SELECT pg_reload_conf()" >/dev/null

# 5. bad input
err=$(psql -X -qAt -c "SELECT mesh_exec_wait(999999999)" 2>&1)
[[ "$err" == *"exec 999999999 does not exist"* ]]
ok $? "an unknown exec id: $err"
err=$(psql -X -qAt -c "SELECT mesh_exec_kill($id, 'BOGUS')" 2>&1)
[[ "$err" == *'signal "BOGUS" is not one mesh_exec_kill sends'* ]]
ok $? "an unknown signal: $err"
err=$(psql -X -qAt -c "SELECT * FROM mesh_exec_output($id3, 999999999999)" 2>&1)
[[ "$err" == *"outside stdout"* ]]
ok $? "an offset past the end: $err"

# 6. release ends every background command; their output outlives the workspace
id4=$(q "SELECT mesh_exec_start('$run', ARRAY['sleep', '$tag'])")
q "SELECT mesh_release('$run')" >/dev/null
is "$(q "SELECT string_agg(status::text, ',' ORDER BY id) FROM mesh.execs WHERE id IN ($id, $id4)")" "killed,killed" \
   "release ends the server and the sleeper: both rows killed"
wait_for_cmd "[ \"\$(pgrep -fc '^sleep $tag\$')\" -eq 0 ]"
ok $? "and their processes are gone"
is "$(q "SELECT stdout LIKE '%Serving HTTP%' FROM mesh_exec_output($id)")" "t" \
   "the output of a released run's command is still there"

# 6a. the run's budget bounds a background command as it bounds mesh_exec
run4=bg4-$$
q "SELECT 1 FROM mesh_acquire('$run4', 'bg-agent', 'bea')" >/dev/null
q "SELECT mesh.run_set_budget('$run4', max_compute_seconds => 2)" >/dev/null
id7=$(q "SELECT mesh_exec_start('$run4', ARRAY['sleep', '$tag'])" 2>/dev/null)
is "$(q "SELECT status FROM mesh_exec_wait($id7, '60 seconds')")" "budget_exhausted" \
   "a background command runs at most what is left of its run's budget"
q "SELECT mesh_release('$run4')" >/dev/null 2>&1

# 6b. a granted secret is redacted from what is stored, even split across two answers
canary="bgcanary$RANDOM$RANDOM$RANDOM"
run3=bg3-$$
q "SELECT mesh.secret_set('bg-agent', 'bgtok', '$canary')" >/dev/null
q "SELECT mesh.environment_set('bg-env', '[{\"kind\": \"secret\", \"name\": \"bgtok\", \"as\": \"TOK\"}]')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$run3', 'bg-agent', 'bea', environment => 'bg-env')" >/dev/null
# half of the value, a pause longer than the notify interval (the worker stores what came), the rest
id6=$(q "SELECT mesh_exec_start('$run3', ARRAY['sh', '-c',
          'printf \"a %s\" \"\${TOK%??????}\"; sleep 0.5; printf \"%s b\\n\" \"\${TOK#\${TOK%??????}}\"'])")
q "SELECT status FROM mesh_exec_wait($id6, '30 seconds')" >/dev/null
is "$(q "SELECT convert_from(data, 'UTF8') FROM mesh_exec_output_bytes($id6)")" "a [redacted TOK] b" \
   "a secret the command wrote in two pieces is stored redacted"
is "$(q "SELECT count(*) FROM mesh.exec_output WHERE exec_id = $id6 AND strpos(convert_from(data, 'UTF8'), '${canary:0:12}') > 0")" 0 \
   "no stored chunk holds a piece of it"
q "SELECT mesh_release('$run3')" >/dev/null

# 7. a worker SIGKILL while a background command runs: a truthful row after the restart
run2=bg2-$$
q "SELECT 1 FROM mesh_acquire('$run2', 'bg-agent', 'bea')" >/dev/null
id5=$(q "SELECT mesh_exec_start('$run2', ARRAY['sleep', '$tag'])")
worker=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'mesh worker' LIMIT 1")
kill -9 "$worker"
wait_server_ready
wait_for "SELECT status <> 'running' FROM mesh.execs WHERE id = $id5"
row=$(q "SELECT status || ': ' || coalesce(error, '') FROM mesh.execs WHERE id = $id5")
[[ "$row" == "error: interrupted"* ]]
ok $? "the command the crash ended is recorded so: $row"
q "SELECT mesh_release('$run2')" >/dev/null 2>&1
done_testing
