#!/usr/bin/env bash
# Redaction: a granted secret, used by a run in a URL's host and query, a header, a userinfo,
# an argument (of mesh_exec's argv and of commands inside), a program's name and output,
# never lands in plain form in the server log (with the embedded daemon's and proxy's lines),
# an event, an exec row, the stored output, a NOTICE or an error the caller sees.
. "$(dirname "$0")/lib.sh"
plan 11
canary="canary$RANDOM$RANDOM$RANDOM"   # fits a host name label
run="redact-$RANDOM"
log="$PGDIR/server.log"
q "SELECT mesh.secret_set('redact-agent', 'tok', '$canary')" >/dev/null
q "SELECT mesh.environment_set('redact-env', '[{\"kind\": \"secret\", \"name\": \"tok\", \"as\": \"TOK\"}]')" >/dev/null
before=$(q "SELECT mesh.egress_policy() - 'default_domains' - 'saved'")
q "SELECT mesh.set_egress_policy('{\"mode\": \"allowlist\"}')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$run', 'redact-agent', 'rita', environment => 'redact-env')" >/dev/null

# The caller's statements name the canary only through a setting, so that a statement the
# server logs with an error does not carry it (that text is the caller's own).
out=$(psql -X -v ON_ERROR_STOP=0 2>&1 <<SQL
SET redact.canary = '$canary';
SELECT stdout, stderr, status FROM mesh_exec('$run', ARRAY['sh', '-c', '
  echo "out \$TOK \$1"; echo "err \$TOK" >&2
  curl -s -m 5 -o /dev/null -H "X-Token: \$TOK" "http://\$TOK.not-listed.invalid/?t=\$TOK"
  curl -s -m 5 -o /dev/null "http://u:\$TOK@\$TOK.userinfo.invalid:80/"
  curl -s -m 5 -o /dev/null --proxytunnel "https://\$TOK.tunnel.invalid:443/"
  "\$TOK-no-such-program"
  exit 0', 'sh', current_setting('redact.canary')]);
SELECT stderr FROM mesh_exec('$run', ARRAY[current_setting('redact.canary')]);
SQL
)
echo "$out" | grep -q "out \[redacted TOK\] \[redacted TOK\]"; ok $? "the output reached the caller, with the value redacted"
echo "$out" | grep -q "refused 3 connection(s): \[redacted TOK\].not-listed.invalid:80"
ok $? "the NOTICE names the refused hosts, redacted"
echo "$out" | grep -q "$canary"; ok $((! $?)) "no output, NOTICE or error the caller saw holds the value"
echo "$out" | grep -q "mesh: \[redacted TOK\]: command not found"; ok $? "a program named by the value fails, its name redacted"

is "$(q "SELECT count(*) FROM mesh.events WHERE run_id = '$run' AND kind = 'egress_denied'
          AND detail->>'host' LIKE '[redacted TOK].%'")" 3 "each denial is an event with the host redacted"
is "$(q "SELECT count(*) FROM mesh.events WHERE strpos(detail::text, '$canary') > 0")" 0 "no event holds the value"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run'
          AND strpos(argv::text || stdout || stderr || coalesce(error, ''), '$canary') = 0")" \
   "$(q "SELECT count(*) FROM mesh.execs WHERE run_id = '$run'")" "no exec row holds the value"
stored=$(q "SELECT mesh.output_text(string_agg(o.data, '' ORDER BY o.exec_id, o.stream, o.start_offset))
             FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id WHERE e.run_id = '$run'")
{ echo "$stored" | grep -q "out \[redacted TOK\] \[redacted TOK\]" && ! echo "$stored" | grep -q "$canary"; }
ok $? "the stored output holds the value redacted, never plain"
is "$(q "SELECT argv[5] FROM mesh.execs WHERE run_id = '$run' ORDER BY id LIMIT 1")" "[redacted TOK]" \
   "an argument holding the value is stored redacted"
q "SELECT pg_catalog.pg_sleep(0)" >/dev/null   # one more round trip: the log lines are written
grep -q "egress to port 80 denied (not_allowlisted)" "$log"; ok $? "the proxy's refusals are in the server log"
grep -c "$canary" "$log" | grep -qx 0; ok $? "the server log never holds the value"

q "SELECT mesh_release('$run')" >/dev/null
q "SELECT mesh.set_egress_policy('$before')" >/dev/null
done_testing
