#!/usr/bin/env bash
# Resumable conversations (mesh_resume, sql/src/15_lifecycle.sql) on the edge backend, against
# the Fly.io Sprites API TEST DOUBLE (test/lib/edge.sh; its sprites are real mesh-sandboxd
# workspaces).  Turn 1 makes a "clone" and a build output and is hibernated while idle: the
# driver leaves its sprite to sleep, and the double puts it to sleep (processes stopped, files
# kept).  Turn 2 resumes it: its first call wakes the same sprite, which still has turn 1's
# files, cloned once.  A negative control: a run that does not resume gets a new, empty sprite.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/edge.sh"
if [ -z "${MESH_EDGE_URL:-}" ]; then
  skip_all "${MESH_EDGE_URL_SKIP:-MESH_EDGE_URL is not set (test/run.sh starts the double)}"
fi
plan 10
tag="er$$"
t=edres-$$
q "SELECT mesh.backend_add('$tag', 'edge', '{\"api_url\": \"$MESH_EDGE_URL\"}', catalog_order => 1000)" >/dev/null
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_EDGE_TOKEN_FILE'), E'\\n'))" >/dev/null
q "SELECT mesh.agent_set('$t-agent', backend => '$tag')" >/dev/null
trap 'mesh_edge_knobs "{\"idle_sleep_ms\": 0}"' EXIT
out() { q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c', \$m\$$2\$m\$])" 2>/dev/null; }
ws() { q "SELECT $2 FROM mesh.workspaces WHERE run_id = '$1'"; }
stat() { mesh_edge_double "/_double/stats/$1" | python3 -c 'import json,sys;print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }

q "SELECT 1 FROM mesh_acquire('$t-1', '$t-agent', 'ann')" >/dev/null
out "$t-1" 'mkdir -p repo/.git build && echo main > repo/.git/HEAD && echo built > build/out && echo 1 > clones' >/dev/null
sprite=$(ws "$t-1" external_ref)
is "$(ws "$t-1" backend_kind)" "$tag" "turn 1 runs on the edge backend"
is "$(stat "$sprite" status)" warm "its sprite is awake after the call"

# idle: the sweep hibernates the run; the sprite, left alone, goes to sleep
mesh_edge_knobs '{"idle_sleep_ms": 200}'
q "SELECT mesh.run_set_budget('$t-1', idle_timeout => '1 second')" >/dev/null
sleep 1.5
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
q "SELECT mesh.run_set_budget('$t-1', idle_timeout => '1 hour')" >/dev/null
is "$(ws "$t-1" "status || '/' || status_reason_code")" "pending/hibernated_idle" "turn 1 is hibernated while idle"
for _ in $(seq 1 50); do [ "$(stat "$sprite" status)" = cold ] && break; sleep 0.1; done
is "$(stat "$sprite" status)/$(stat "$sprite" sleeps)" "cold/1" "its sprite sleeps (processes stopped, files kept)"
mesh_edge_knobs '{"idle_sleep_ms": 0}'

# turn 2 resumes it: the first call wakes the same sprite
q "SELECT 1 FROM mesh_acquire('$t-2', '$t-agent', 'ann')" >/dev/null
like "$(q "SELECT mesh_resume('$t-2', '$t-1')" 2>&1)" "resumes the hibernated workspace of run \"$t-1\"" \
     "mesh_resume takes turn 1's workspace"
is "$(stat "$sprite" wakes)" 0 "the sprite is still asleep before turn 2's first call"
is "$(out "$t-2" 'cat repo/.git/HEAD build/out clones' | xargs)" "main built 1" \
   "turn 2's first call finds turn 1's clone and build output, cloned once"
is "$(stat "$sprite" wakes)/$(ws "$t-2" external_ref)" "1/$sprite" "that call woke the same sprite"

# negative control: a run that does not resume gets a new, empty sprite
q "SELECT 1 FROM mesh_acquire('$t-3', '$t-agent', 'ann')" >/dev/null
is "$(out "$t-3" 'ls build 2>/dev/null | wc -l')" 0 "a run that does not resume starts empty"
q "SELECT mesh_release('$t-2')" >/dev/null
q "SELECT mesh_release('$t-3')" >/dev/null
is "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$MESH_EDGE_TOKEN_FILE")" "$MESH_EDGE_URL/v1/sprites/$sprite")" 404 \
   "releasing turn 2 deletes the sprite"
done_testing
