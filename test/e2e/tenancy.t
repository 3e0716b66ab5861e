#!/usr/bin/env bash
# Progress channels under run ownership (on by default), with real connections (psycopg2): two
# harness LOGIN roles and one LOGIN role outside the harness group.  A's background command
# NOTIFYs on a channel only A can name (mesh_exec_channel); B and the outsider LISTEN on every
# name they can derive and see none of its progress or its end, nor the channel's name in
# pg_stat_activity, while A's own listener gets every step.  The outsider's connection does get
# a notification on a channel it knows, so its silence is not a deaf connection.  Two roles
# declaring their first run under the same new agent at once: exactly one claims it.
. "$(dirname "$0")/lib.sh"
plan 12
PY=/usr/bin/python3             # Debian's python, where python3-psycopg2 lives
run=ten-$$
roles="ten_a_$$ ten_b_$$ ten_out_$$"

q "CREATE ROLE ten_a_$$ LOGIN IN ROLE mesh_harness" >/dev/null
q "CREATE ROLE ten_b_$$ LOGIN IN ROLE mesh_harness" >/dev/null
q "CREATE ROLE ten_out_$$ LOGIN" >/dev/null
is "$(q "SELECT run_ownership FROM mesh.settings")" "t" "run ownership is on (the default)"

cat > /tmp/ten-listen-$$.py <<'EOF'
import json, select, sys
import psycopg2, psycopg2.extensions
run, role_a, role_b, role_out = sys.argv[1:5]

def connect(user):
    c = psycopg2.connect(user=user)
    c.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
    return c, c.cursor()

def refused(cur, sql, args):
    try:
        cur.execute(sql, args)
        return "answered"
    except psycopg2.Error as e:
        return e.pgcode

a, ca = connect(role_a)
b, cb = connect(role_b)
o, co = connect(role_out)
ca.execute("SELECT 1 FROM mesh_acquire(%s, %s, 'ann')", (run, run + "-agent"))
# the command waits for a file A writes once every listener is in place
ca.execute("SELECT mesh_exec_start(%s, ARRAY['sh', '-c', "
           "'while [ ! -f go ]; do sleep 0.05; done; for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done'])",
           (run,))
exec_id = ca.fetchone()[0]
ca.execute("SELECT mesh_exec_channel(%s)", (exec_id,))
channel = ca.fetchone()[0]
ca.execute('LISTEN "%s"' % channel)
res = {"b_channel": refused(cb, "SELECT mesh_exec_channel(%s)", (exec_id,)),
       "out_channel": refused(co, "SELECT mesh_exec_channel(%s)", (exec_id,)),
       "b_output": refused(cb, "SELECT * FROM mesh_exec_output(%s)", (exec_id,))}
# every name a role that is not the owner can derive from the id
guesses = ["mesh_exec_%d" % exec_id, "mesh_exec_%d_" % exec_id, "mesh_exec", "mesh_exec_%d_0" % exec_id]
for cur in (cb, co):
    for g in guesses:
        cur.execute('LISTEN "%s"' % g)
    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
                ("%" + channel[-32:] + "%",))
    res.setdefault("key_in_activity", []).append(cur.fetchone()[0])
ca.execute("SELECT mesh_write_file(%s, 'go', 'x')", (run,))
steps, end = 0, None
while end is None:
    if select.select([a], [], [], 60) == ([], [], []):
        break
    a.poll()
    while a.notifies:
        payload = json.loads(a.notifies.pop(0).payload)
        steps += 1
        if "status" in payload:
            end = payload
res.update({"a_steps": steps, "a_end": end})
# the NOTIFYs were committed before A read them: a round trip delivers any that matched
for name, conn, cur in (("b", b, cb), ("out", o, co)):
    cur.execute("SELECT 1")
    conn.poll()
    res[name + "_heard"] = [n.channel for n in conn.notifies]
# the outsider's connection hears a channel it knows
co.execute("LISTEN ten_control")
ca.execute("NOTIFY ten_control, 'hello'")
co.execute("SELECT 1")
o.poll()
res["out_control"] = [n.payload for n in o.notifies if n.channel == "ten_control"]
ca.execute("SELECT mesh_release(%s)", (run,))
print(json.dumps(res))
EOF
res=$($PY /tmp/ten-listen-$$.py "$run" ten_a_$$ ten_b_$$ ten_out_$$ 2>&1)
rm -f /tmp/ten-listen-$$.py
echo "# $res"
is "$(echo "$res" | jq -r '.a_end.status + " " + (.a_end.exit_code|tostring)')" "ok 0" \
   "A's listener hears its command's end"
ok $([ "$(echo "$res" | jq '.a_steps')" -ge 2 ]; echo $?) \
   "and its progress before it ($(echo "$res" | jq '.a_steps') notifications)"
is "$(echo "$res" | jq -r '.b_channel')" "42704" "B cannot learn the channel: the exec does not exist for it"
is "$(echo "$res" | jq -r '.b_output')" "42704" "nor read its output"
is "$(echo "$res" | jq -r '.out_channel')" "42501" "a role outside the harness group cannot call mesh_exec_channel"
is "$(echo "$res" | jq -c '.b_heard')" "[]" "B, LISTENing on every name it can derive from the id, heard nothing"
is "$(echo "$res" | jq -c '.out_heard')" "[]" "nor did the role outside the harness group"
is "$(echo "$res" | jq -c '.key_in_activity')" "[0,0]" "neither finds the channel's key in pg_stat_activity"
is "$(echo "$res" | jq -c '.out_control')" '["hello"]' "the outsider's connection hears a channel it knows"

# a race for ten fresh agents: both roles declare under each at once, through their workers
for i in $(seq 1 10); do
  for r in a b; do
    PGUSER=ten_${r}_$$ psql -X -qAt -c "SELECT status FROM mesh_acquire('$run-race-$r$i', '$run-race-agent-$i', '$r')" \
      >/dev/null 2>&1 &
  done
done
wait
is "$(q "SELECT string_agg(DISTINCT n::text, ',') FROM (SELECT count(*) AS n FROM mesh.workspaces
           WHERE run_id LIKE '$run-race-%' GROUP BY agent_id) c")" "1" \
   "under each contested agent exactly one role's declaration went through"
is "$(q "SELECT count(*) || ' ' || count(DISTINCT r.agent_id) || ' ' || bool_and(w.owner_role::oid = r.role::oid)
           FROM mesh.agent_access r JOIN mesh.workspaces w ON w.agent_id = r.agent_id
          WHERE r.agent_id LIKE '$run-race-agent-%'")" "10 10 true" \
   "each was claimed once, by the role whose run it holds"
q "SELECT count(mesh_release(run_id)) FROM mesh.workspaces WHERE run_id LIKE '$run-race-%'" >/dev/null

for r in $roles; do q "DROP ROLE $r" >/dev/null; done
done_testing
