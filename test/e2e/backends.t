#!/usr/bin/env bash
# Three backends enabled at once: the embedded daemon ("local", unix socket), a second
# mesh-sandboxd run as root on TCP with a bearer token ("remote"), and Kubernetes ("kube",
# through the API-server test double of test/lib/kubernetes.sh, whose pods run real
# mesh-sandboxd processes).  Selection, per-agent pins, the disable cascade, release by the
# row, size ceilings, capability records, and the credentials never leaking.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/kubernetes.sh"
plan 34
sd=$(mktemp -d /tmp/mesh-e2e-sd.XXXXXX); chmod 711 "$sd"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
token="e2e-secret-$RANDOM$RANDOM$RANDOM"
echo "$token" > "$sd/token"; chmod 600 "$sd/token"
cp "$sd/token" "$sd/token.pg"; chown postgres "$sd/token.pg"; chmod 400 "$sd/token.pg"
$(pg_config --bindir)/mesh-sandboxd --listen "127.0.0.1:$port" --token-file "$sd/token" \
  --state-dir "$sd/state" --cgroup-name "mesh-e2e-$$" 2> "$sd/log" &
daemon=$!
cleanup() {   # destroy what the test daemon still holds (it keeps workspaces across its own exit)
  for id in $(curl -sf -m 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/workspaces" \
              | python3 -c 'import json,sys;[print(w["id"]) for w in json.load(sys.stdin)["workspaces"]]' 2>/dev/null); do
    curl -sf -m 10 -X DELETE -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/workspaces/$id" >/dev/null
  done
  kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$sd"
  # the daemon leaves its (now empty) cgroup subtree behind: remove it, children first
  for h in /sys/fs/cgroup/*/"mesh-e2e-$$"; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
}
trap cleanup EXIT
for _ in $(seq 1 100); do curl -sf -m 2 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/capabilities" >/dev/null && break; sleep 0.1; done
remote_has() { curl -sf -m 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/workspaces/$1" >/dev/null; }
local_has() { curl -sf -m 5 --unix-socket "$PGDIR/data/mesh_sandboxd/sandboxd.sock" "http://localhost/v1/workspaces/$1" >/dev/null; }
ref_of() { q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'"; }

# the credential is read by the server from a file: it never appears in a statement
q "SELECT mesh.backend_add('remote', 'sandboxd', '{\"url\": \"http://127.0.0.1:$port\"}', catalog_order => 10)" >/dev/null
q "SELECT mesh.backend_set_credential('remote', trim(pg_read_file('$sd/token.pg'), E'\n'))" >/dev/null
is "$(q "SELECT string_agg(name, ',' ORDER BY catalog_order) FROM mesh.backend_catalog WHERE enabled")" "local,remote" "two backends enabled"

# unpinned: the instance default (first in catalog order), logged as an implicit choice
q "SELECT 1 FROM mesh_acquire('sel-1', 'free-agent', 'mia')" >/dev/null
q "SELECT exit_code FROM mesh_exec('sel-1', ARRAY['true'])" >/dev/null
is "$(q "SELECT backend_kind FROM mesh.workspaces WHERE run_id = 'sel-1'")" local "an unpinned agent gets the instance default"
is "$(q "SELECT detail->>'implicit_selection' FROM mesh.events WHERE run_id = 'sel-1' AND kind = 'acquiring'")" true \
   "the implicit choice is recorded"
grep -q 'run "sel-1" of agent "free-agent" uses backend "local", the instance default' "$PGDIR/server.log"
ok $? "the implicit choice is logged at materialization"

# a pin routes the agent to its backend, with the tier clamped to the backend's ceiling
q "SELECT mesh.backend_set_max_size('remote', 'small')" >/dev/null
q "SELECT mesh.agent_set('pinned-agent', 'remote', default_size => 'xlarge')" >/dev/null
q "SELECT 1 FROM mesh_acquire('pin-1', 'pinned-agent', 'mia')" >/dev/null
is "$(q "SELECT stdout FROM mesh_exec('pin-1', ARRAY['echo', 'on remote'])")" "on remote" "a pinned agent's exec runs"
is "$(q "SELECT backend_kind || '/' || size FROM mesh.workspaces WHERE run_id = 'pin-1'")" "remote/small" \
   "on its pinned backend, at the backend's size ceiling"
size=$(curl -sf -m 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/workspaces/$(ref_of pin-1)" | python3 -c 'import json,sys;print(json.load(sys.stdin)["size"])')
is "$size" small "the backend was asked for the clamped tier"
remote_has "$(ref_of pin-1)"; ok $? "the remote daemon holds the pinned run's workspace"
local_has "$(ref_of pin-1)"; ok $((! $?)) "the local daemon does not"
is "$(q "SELECT capabilities->>'shell' FROM mesh.workspaces WHERE run_id = 'pin-1'")" true "capabilities are recorded per workspace"
is "$(q "SELECT (w1.capabilities->>'resource_limits') || '/' || (w2.capabilities->>'resource_limits')
         FROM mesh.workspaces w1, mesh.workspaces w2 WHERE w1.run_id = 'pin-1' AND w2.run_id = 'sel-1'")" "true/true" \
   "as each host reports them: limits enforced by the root daemon and by the embedded one after its host set-up"
is "$(q "SELECT (w1.capabilities->>'disk_limits') || '/' || (w2.capabilities->>'disk_limits')
         FROM mesh.workspaces w1, mesh.workspaces w2 WHERE w1.run_id = 'pin-1' AND w2.run_id = 'sel-1'")" "false/true" \
   "a disk bound on the embedded daemon's own filesystem, none on the bare root one"

# a third backend, Kubernetes: an agent pinned there runs in a pod while the others keep theirs
if [ -n "${MESH_K8S_URL:-}" ]; then
  q "SELECT mesh.backend_add('kube', 'kubernetes', '$MESH_K8S_CONFIG', catalog_order => 20)" >/dev/null
  q "SELECT mesh.backend_set_credential('kube', trim(pg_read_file('$MESH_K8S_TOKEN_FILE'), E'\n'))" >/dev/null
  q "SELECT mesh.agent_set('kube-agent', 'kube', default_size => 'standard')" >/dev/null
  is "$(q "SELECT string_agg(name, ',' ORDER BY catalog_order) FROM mesh.backend_catalog WHERE enabled")" \
     "local,remote,kube" "three backends enabled"
  q "SELECT 1 FROM mesh_acquire('kube-1', 'kube-agent', 'mia')" >/dev/null
  is "$(q "SELECT stdout FROM mesh_exec('kube-1', ARRAY['echo', 'in a pod'])")" "in a pod" "a kubernetes-pinned agent's exec runs"
  is "$(q "SELECT stdout FROM mesh_exec('pin-1', ARRAY['echo', 'still remote'])") $(q "SELECT backend_kind FROM mesh.workspaces WHERE run_id = 'pin-1'")" \
     "still remote remote" "while the remote-pinned agent keeps its own backend"
  pod=$(mesh_k8s_api "/api/v1/namespaces/mesh/pods/$(ref_of kube-1)")
  is "$(python3 -c 'import json,sys;p=json.load(sys.stdin);m=p["metadata"]["labels"];c=p["spec"]["containers"][0];print(m["mesh.backend"], c["resources"]["limits"]["memory"], c["args"][-1]==p["metadata"]["name"], p["status"]["phase"])' <<<"$pod")" \
     "kube 2176Mi True Running" "its pod: labelled with the backend, the standard tier's limits, the daemon serving only that workspace"
  is "$(q "SELECT (capabilities->>'hibernate') || '/' || (capabilities->>'egress_control') FROM mesh.workspaces WHERE run_id = 'kube-1'")" \
     "false/true" "capabilities as a pod gives them: no hibernation, egress enforced by the daemon inside"
  kref=$(ref_of kube-1)
  is "$(q "SELECT mesh_release('kube-1')")" destroyed "releasing a kubernetes workspace destroys it"
  phase=$(mesh_k8s_api "/api/v1/namespaces/mesh/pods/$kref" | python3 -c 'import json,sys;p=json.load(sys.stdin);print("gone" if p.get("code")==404 else "terminating" if p["metadata"].get("deletionTimestamp") else "alive")')
  case $phase in gone|terminating) r=0 ;; *) r=1 ;; esac
  ok $r "and its pod is deleted ($phase)"
  is "$(q "SELECT count(*) FROM mesh.backend_credentials WHERE backend = 'kube'")" 1 "the service-account token is stored as the backend's credential"
  q "SELECT mesh.backend_disable('kube')" >/dev/null
else
  for _ in 1 2 3 4 5 6 7 8; do ok 0 "# SKIP kubernetes: ${MESH_K8S_URL_SKIP:-MESH_K8S_URL is not set}"; done
fi

# the default changes; existing workspaces are still released by the backend their row names
q "SELECT mesh.backend_set_order('remote', -1)" >/dev/null
q "SELECT 1 FROM mesh_acquire('sel-2', 'free-agent', 'mia')" >/dev/null
q "SELECT exit_code FROM mesh_exec('sel-2', ARRAY['true'])" >/dev/null
is "$(q "SELECT backend_kind FROM mesh.workspaces WHERE run_id = 'sel-2'")" remote "a new default applies to new workspaces"
ref1=$(ref_of sel-1)
is "$(q "SELECT mesh_release('sel-1')")" destroyed "a workspace made before the change is released"
local_has "$ref1"; ok $((! $?)) "by the backend its row recorded (local), not today's default"

# disabling un-pins and reports who was reset; the disabled backend still releases what it minted
is "$(q "SELECT mesh.backend_disable('remote')")" "{pinned-agent}" "disabling reports the agents it reset"
is "$(q "SELECT coalesce(backend, 'none') FROM mesh.agents WHERE agent_id = 'pinned-agent'")" none "the pin is gone"
psql -X -qAt -c "SELECT mesh.agent_set('pinned-agent', 'remote')" 2> "$sd/pin.err" >/dev/null
grep -q "not an enabled backend" "$sd/pin.err"; ok $? "a pin to a disabled backend is refused"
ref2=$(ref_of pin-1)
is "$(q "SELECT mesh_release('pin-1')")" destroyed "a disabled backend still releases what it minted"
remote_has "$ref2"; ok $((! $?)) "and the remote daemon no longer holds it"

# no catalog entry left: the row stays as evidence, released by hand
q "SELECT mesh_release('sel-2')" >/dev/null
q "SELECT mesh.backend_enable('remote')" >/dev/null
q "SELECT 1 FROM mesh_acquire('gone-1', 'free-agent', 'mia')" >/dev/null
q "SELECT exit_code FROM mesh_exec('gone-1', ARRAY['true'])" >/dev/null
ref3=$(ref_of gone-1)
q "DELETE FROM mesh.backends WHERE name = 'remote'" >/dev/null
is "$(q "SELECT mesh_release('gone-1')")" "must be released by hand" "a backend with no catalog entry: must be released by hand"
is "$(q "SELECT release_outcome FROM mesh.workspaces WHERE run_id = 'gone-1'")" "must be released by hand" \
   "the row says so, and stays"
remote_has "$ref3"; ok $? "the sandbox is still there, as the row says"
curl -sf -m 5 -X DELETE -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/workspaces/$ref3" >/dev/null

# the credentials never leaked (the remote daemon's token and the service account's)
ktoken=$(cat "${MESH_K8S_TOKEN_FILE:-/dev/null}" 2>/dev/null); ktoken=${ktoken:-$token}
leaks=$(grep -c -e "$token" -e "$ktoken" "$PGDIR/server.log")
is "$leaks" 0 "the credential is not in the server log"
is "$(q "SELECT count(*) FROM pg_stat_activity WHERE (query LIKE '%$token%' OR query LIKE '%$ktoken%') AND pid <> pg_backend_pid()")" 0 \
   "nor in pg_stat_activity"
is "$(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$token%' OR detail::text LIKE '%$ktoken%'") $(q "SELECT count(*) FROM mesh.execs WHERE coalesce(stdout,'') || coalesce(stderr,'') || coalesce(error,'') LIKE ANY (ARRAY['%$token%', '%$ktoken%'])")" \
   "0 0" "nor in events or exec rows"
done_testing
