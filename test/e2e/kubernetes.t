#!/usr/bin/env bash
# The kubernetes backend when its API server misbehaves, against the API-server TEST DOUBLE
# (test/lib/kubernetes.sh; its pods are real mesh-sandboxd processes).  500s, a hang and a
# refused or unauthorized token each fail the run with an error an operator can act on, naming the backend
# and never the token; nothing is leaked; once the server is back the run's next call works
# (a pod the hung create left behind is adopted, or replaced if it failed: 409 AlreadyExists)
# and the reaper reconciles:
# a pod with this install's labels and no row is deleted, and a pod deleted behind mesh's
# back marks its row failed. Four runs at once get a pod each, and one pod's key opens no other.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/kubernetes.sh"
if [ -z "${MESH_K8S_URL:-}" ]; then
  skip_all "${MESH_K8S_URL_SKIP:-MESH_K8S_URL is not set (test/run.sh starts the double)}"
fi
plan 39
tag="kf$$"
token=$(cat "$MESH_K8S_TOKEN_FILE")
cfg=$(python3 -c 'import json,sys;c=json.loads(sys.argv[1]);c["request_timeout_ms"]=2000;print(json.dumps(c))' "$MESH_K8S_CONFIG")
trap 'mesh_k8s_mode normal' EXIT
row() { q "SELECT status FROM mesh.workspaces WHERE run_id = '$1'"; }
ref_of() { q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'"; }
run_err() { psql -X -qAt -c "SELECT exit_code FROM mesh_exec('$1', ARRAY['true'])" 2>&1 | grep -v '^NOTICE:'; }
# this backend's pods that are not on their way out
alive_pods() {
  mesh_k8s_api "/api/v1/namespaces/mesh/pods?labelSelector=mesh.backend%3D$tag" |
    python3 -c 'import json,sys;print(" ".join(sorted(p["metadata"]["name"] for p in json.load(sys.stdin)["items"] if "deletionTimestamp" not in p["metadata"])))'
}
pod_code() { mesh_k8s_api -o /dev/null -w '%{http_code}' "/api/v1/namespaces/mesh/pods/$1"; }
# the driver's pod (test/kubernetes/fixtures/pod-create-request.json, the shape the namespace
# admits) named $1 with the test image, changed by the python statement $2 on it (p)
shaped() {
  python3 -c 'import json,sys;p=json.load(open(sys.argv[1]));p["metadata"]["name"]=sys.argv[2];p["spec"]["containers"][0]["image"]="mesh-sandboxd:test";exec(sys.argv[3]);print(json.dumps(p))' \
    "$(dirname "$0")/../kubernetes/fixtures/pod-create-request.json" "$1" "${2:-pass}"
}

q "SELECT mesh.backend_add('$tag', 'kubernetes', '$cfg', catalog_order => 1000)" >/dev/null
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_K8S_TOKEN_FILE'), E'\\n'))" >/dev/null
q "SELECT mesh.agent_set('$tag-a', backend => '$tag')" >/dev/null

# 1. the API server answers 500
mesh_k8s_mode error500
q "SELECT 1 FROM mesh_acquire('$tag-1', '$tag-a', 'kim')" >/dev/null
err=$(run_err "$tag-1")
echo "$err" | grep -q "backend \"$tag\" (Kubernetes) could not create a pod: HTTP 500 InternalError"
ok $? "500: the error names the backend, the step and the server's reason: $(echo "$err" | head -1)"
is "$(row "$tag-1")" pending "the row is back to pending (the run's next call tries again)"
mesh_k8s_mode normal
is "$(alive_pods)" "" "no pod was left behind"

# 2. the API server hangs: the request's deadline ends it; the held create lands later
mesh_k8s_mode hang
q "SELECT 1 FROM mesh_acquire('$tag-2', '$tag-a', 'kim')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$tag-5', '$tag-a', 'kim')" >/dev/null
run_err "$tag-5" >/dev/null
err=$(run_err "$tag-2")
echo "$err" | grep -q "backend \"$tag\" cannot be reached: .*[Tt]imed out"
ok $? "hang: the error names the backend and the timeout: $(echo "$err" | head -1)"
is "$(row "$tag-2")" pending "the row is back to pending"
mesh_k8s_mode normal
for _ in $(seq 1 50); do [ "$(pod_code "$(ref_of "$tag-2")")" = 200 ] && break; sleep 0.1; done
is "$(pod_code "$(ref_of "$tag-2")")" 200 "the held create reached the server after all: a pod exists with no acquire waiting for it"
is "$(q "SELECT stdout FROM mesh_exec('$tag-2', ARRAY['echo', 'adopted'])" 2>/dev/null)" adopted \
   "once the server is back, the run's next call adopts that pod (409 AlreadyExists) and runs"
# the other held create's pod dies before its run comes back: the next call replaces it
ref5=$(ref_of "$tag-5")
pod_field() { mesh_k8s_api "/api/v1/namespaces/mesh/pods/$1" | python3 -c "import json,sys;p=json.load(sys.stdin);print($2)" 2>/dev/null; }
for _ in $(seq 1 100); do [ "$(pod_field "$ref5" 'p["status"]["phase"]')" = Running ] && break; sleep 0.1; done
uid5=$(pod_field "$ref5" 'p["metadata"]["uid"]')
kill -KILL "$(curl -sf -m 5 --cacert "$MESH_K8S_CA_FILE" "$MESH_K8S_URL/_double/pods" | python3 -c "import json,sys;print(json.load(sys.stdin)['mesh/$ref5']['pid'])")"
for _ in $(seq 1 100); do [ "$(pod_field "$ref5" 'p["status"]["phase"]')" = Failed ] && break; sleep 0.1; done
is "$(q "SELECT stdout FROM mesh_exec('$tag-5', ARRAY['echo', 'replaced'])" 2>/dev/null)" replaced \
   "a failed pod of ours in the way (409) is deleted and made again, and the run goes on"
uid=$(pod_field "$ref5" 'p["metadata"]["uid"]')
[ -n "$uid" ] && [ "$uid" != "$uid5" ]; ok $? "in a new pod"
is "$(alive_pods)" "$(printf '%s\n' "$(ref_of "$tag-2")" "$ref5" | LC_ALL=C sort | paste -sd ' ')" "one pod per run, not two"

# 3. the token is refused
q "SELECT mesh.backend_set_credential('$tag', 'not-the-token-$$')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$tag-3', '$tag-a', 'kim')" >/dev/null
err=$(run_err "$tag-3")
echo "$err" | grep -q "backend \"$tag\" (Kubernetes) refused the service-account token .*mesh.backend_set_credential"
ok $? "401: the error says the token was refused and how to set one: $(echo "$err" | head -1)"
echo "$err" | grep -q "not-the-token-$$"; ok $((! $?)) "and does not show the token"
err=$(psql -X -qAt -c "SELECT stdout FROM mesh_exec('$tag-2', ARRAY['echo', 'x'])" 2>&1)
echo "$err" | grep -q "refused the service-account token"
ok $? "a ready workspace's exec through the proxy reports the same refusal"
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_K8S_DENIED_TOKEN_FILE'), E'\\n'))" >/dev/null
err=$(run_err "$tag-3")
echo "$err" | grep -q "backend \"$tag\" (Kubernetes): the service account may not create a pod in namespace \"mesh\" (HTTP 403: .*); bind it to the Role in deploy/kubernetes/"
ok $? "403: a token the cluster does not authorize: the error says which permission is missing and where it is granted"
q "SELECT mesh.backend_set_credential('$tag', trim(pg_read_file('$MESH_K8S_TOKEN_FILE'), E'\\n'))" >/dev/null
is "$(q "SELECT stdout FROM mesh_exec('$tag-3', ARRAY['echo', 'back'])" 2>/dev/null)" back "with the token restored, the run works"

# 3b. an image the cluster cannot pull: the acquire fails at once, with the reason, and its pod is removed
q "SELECT mesh.backend_configure('$tag', '$(python3 -c 'import json,sys;c=json.loads(sys.argv[1]);c["image"]="mesh-sandboxd:missing";print(json.dumps(c))' "$cfg")')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$tag-6', '$tag-a', 'kim')" >/dev/null
err=$(psql -X -qAt -v VERBOSITY=verbose -c "SELECT exit_code FROM mesh_exec('$tag-6', ARRAY['true'])" 2>&1 | grep -v '^NOTICE:')
echo "$err" | grep -q "backend \"$tag\" (Kubernetes): pod \"$(ref_of "$tag-6")\" will not start: \(ErrImagePull\|ImagePullBackOff\); see kubectl describe pod"
ok $? "an image that cannot be pulled: the error says so and how to look: $(echo "$err" | grep ERROR | head -1)"
is "$(alive_pods | grep -cw "$(ref_of "$tag-6")")" 0 "and the pod that will not start is deleted"
q "SELECT mesh.backend_configure('$tag', '$cfg')" >/dev/null

# 4. the reaper reconciles with the recovered server: a labelled pod without a row is deleted
install=$(q "SELECT system_identifier FROM pg_control_system()")
orphan="mesh-$install-999999$$"
manifest=$(shaped "$orphan" "p['metadata']['labels']={'mesh.install':'$install','mesh.backend':'$tag'};p['spec']['containers'][0]['args'][1]='$orphan';p['spec']['containers'][0]['env']=[{'name':'MESH_SANDBOXD_TOKEN','value':'x$$'}]")
is "$(mesh_k8s_api -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data "$manifest" /api/v1/namespaces/mesh/pods)" 201 \
   "an orphan pod with this install's labels is created behind mesh's back"
actions=$(q "SELECT string_agg(action || ':' || coalesce(backend, ''), ' ') FROM mesh.sweep()")
echo "$actions" | grep -q "reconciled:$tag"; ok $? "a sweep reconciles the backend"
case $(pod_code "$orphan") in 404) r=0 ;; 200) mesh_k8s_api "/api/v1/namespaces/mesh/pods/$orphan" | grep -q deletionTimestamp; r=$? ;; *) r=1 ;; esac
ok $r "and deletes the orphan pod"

# 5. a pod deleted behind mesh's back: the sweep marks its row failed
ref2=$(ref_of "$tag-2")
mesh_k8s_api -o /dev/null -X DELETE "/api/v1/namespaces/mesh/pods/$ref2"
for _ in $(seq 1 100); do [ "$(pod_code "$ref2")" = 404 ] && break; sleep 0.1; done
is "$(pod_code "$ref2")" 404 "the pod is deleted with the API"
did=$(q "SELECT string_agg(action, ',') FROM mesh.sweep() WHERE run_id = '$tag-2'")
echo "$did" | grep -q workspace_lost; ok $? "the sweep reports the workspace lost ($did)"
is "$(row "$tag-2")" failed "and marks its row failed"

# 6. many runs at once: one pod each; one pod's key opens no other pod's daemon
for i in 1 2 3 4; do
  ( q "SELECT 1 FROM mesh_acquire('$tag-c$i', '$tag-a', 'kim')" >/dev/null
    q "SELECT stdout FROM mesh_exec('$tag-c$i', ARRAY['echo', 'c$i'])" 2>/dev/null > "$PGDIR/../$tag-c$i.out" ) &
done
wait
is "$(cat "$PGDIR/../$tag-c"{1,2,3,4}.out | tr -s '\n' ' ')" "c1 c2 c3 c4 " "four runs acquire and exec concurrently"
rm -f "$PGDIR/../$tag-c"{1,2,3,4}.out
pods=$(alive_pods)
n=0; for i in 1 2 3 4; do [[ " $pods " == *" $(ref_of "$tag-c$i") "* ]] && n=$((n + 1)); done
is "$n $(for i in 1 2 3 4; do ref_of "$tag-c$i"; done | sort -u | wc -l)" "4 4" "each in a pod of its own"
ref1=$(ref_of "$tag-c1"); ref2=$(ref_of "$tag-c2")
key1=$(mesh_k8s_api "/api/v1/namespaces/mesh/pods/$ref1" | python3 -c 'import json,sys;print(next(e["value"] for e in json.load(sys.stdin)["spec"]["containers"][0]["env"] if e["name"]=="MESH_SANDBOXD_TOKEN"))')
port2=$(curl -sf -m 5 --cacert "$MESH_K8S_CA_FILE" "$MESH_K8S_URL/_double/pods" | python3 -c "import json,sys;print(json.load(sys.stdin)['mesh/$ref2']['port'])")
is "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "X-Mesh-Sandboxd-Token: $key1" "http://127.0.0.1:$port2/v1/workspaces/$ref2")" 401 \
   "the key of one pod's daemon is refused by another's"
is "$(mesh_k8s_api -o /dev/null -w '%{http_code}' -H "X-Mesh-Sandboxd-Token: $key1" "/api/v1/namespaces/mesh/pods/$ref2:7070/proxy/v1/workspaces/$ref1")" 401 \
   "and through the API server's proxy too"
# a pod whose container dies (phase Failed) holds no workspace: the sweep marks the row failed
pid1=$(curl -sf -m 5 --cacert "$MESH_K8S_CA_FILE" "$MESH_K8S_URL/_double/pods" | python3 -c "import json,sys;print(json.load(sys.stdin)['mesh/$ref1']['pid'])")
kill -KILL "$pid1"
for _ in $(seq 1 100); do
  [ "$(mesh_k8s_api "/api/v1/namespaces/mesh/pods/$ref1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["status"]["phase"])')" = Failed ] && break
  sleep 0.1
done
did=$(q "SELECT string_agg(action, ',') FROM mesh.sweep() WHERE run_id = '$tag-c1'")
is "$(row "$tag-c1")" failed "a pod whose container died: the sweep marks its row failed ($did)"
for i in 1 2 3 4; do q "SELECT mesh_release('$tag-c$i')" >/dev/null; done

# 7. the driver checks the API server's certificate against its ca_bundle, not the system's
other=$(mktemp -d /tmp/mesh-k8s-ca.XXXXXX)
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=another-ca" -keyout "$other/key" -out "$other/ca.pem" 2>/dev/null
wrong_ca=$(python3 -c 'import json,sys;c=json.loads(sys.argv[1]);c["ca_bundle"]=open(sys.argv[2]).read();print(json.dumps(c))' "$cfg" "$other/ca.pem")
rm -rf "$other"
q "SELECT mesh.backend_configure('$tag', '$wrong_ca')" >/dev/null
q "SELECT 1 FROM mesh_acquire('$tag-4', '$tag-a', 'kim')" >/dev/null
err=$(run_err "$tag-4")
echo "$err" | grep -q "backend \"$tag\" cannot be reached: .*certificate"
ok $? "a server whose certificate the configured CA did not sign is refused: $(echo "$err" | head -1)"
q "SELECT mesh.backend_configure('$tag', '$cfg')" >/dev/null

# 8. the double refuses what a real API server refuses (so the driver's requests are checked)
post() { mesh_k8s_api -o /dev/null -w '%{http_code}' -X POST -H "Content-Type: $1" --data "$2" "/api/v1/namespaces/mesh/pods${3:-?fieldValidation=Strict}"; }
pod_json() { echo "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"none\"$2}]$3}}"; }
is "$(post application/json "$(pod_json "probe-$$" ',"imagePullPolice":"Always"')")" 400 "an unknown field under strict validation: 400"
is "$(post text/plain "$(pod_json "probe-$$")")" 415 "a body that is not JSON by its content type: 415"
is "$(post application/json "$(pod_json "probe-$$" ',"env":[{"name":"A","value":1}]')")" 400 "a number where a string belongs: 400"
is "$(post application/json "$(pod_json "Probe_$$")")" 422 "an invalid pod name: 422 Invalid"
is "$(post application/json "$(pod_json "probe-$$" '' ',"runtimeClassName":"gvisor"')")" 403 "a RuntimeClass the cluster lacks: 403 from admission"
# ... and what the shipped manifests (deploy/kubernetes/) refuse in the sandbox namespace: every
# pod the driver made above was admitted by the same checks
is "$(post application/json "$(shaped "probe-$$" 'p["spec"]["containers"][0]["securityContext"]["privileged"]=True')")" 403 \
   "a privileged pod: 403 from admission (Pod Security restricted, the pod-shape policy)"
is "$(post application/json "$(shaped "probe-$$" 'p["spec"]["automountServiceAccountToken"]=True')")" 403 \
   "a pod that would mount a service-account token: 403 from the pod-shape policy"
is "$(curl -s -m 10 -o /dev/null -w '%{http_code}' --cacert "$MESH_K8S_CA_FILE" "$MESH_K8S_URL/api/v1/namespaces/mesh/pods")" 401 "no token: 401"

# nothing leaked
for r in "$tag-1" "$tag-2" "$tag-3" "$tag-4" "$tag-5" "$tag-6"; do q "SELECT mesh_release('$r')" >/dev/null 2>&1; done
for _ in $(seq 1 50); do [ -z "$(alive_pods)" ] && break; sleep 0.1; done
is "$(alive_pods)" "" "every pod of the backend is gone after release"
is "$(grep -c "$token" "$PGDIR/server.log") $(q "SELECT count(*) FROM mesh.events WHERE detail::text LIKE '%$token%'")" "0 0" \
   "the service-account token is in no log line and no event"
q "SELECT mesh.backend_disable('$tag')" >/dev/null
done_testing
