#!/usr/bin/env bash
# bench/kubernetes.sh: the kubernetes backend, through the API-server TEST DOUBLE, against
# mesh-sandboxd ("local"), in one run, as ratios.
#
#   sudo bench/kubernetes.sh [WARM_ITERATIONS] [COLD_ITERATIONS]
#
# 1. warm exec: SELECT mesh_exec(... true) in a materialized workspace, median, per backend
# 2. cold acquisition: the first call of a new run (pod created, watched until Ready, the
#    daemon's acquire, then exec true), median, per backend
# 3. the double's own overhead, so the ratios can be read for a real API server: the same exec
#    sent straight to the pod's daemon vs through the double's pods/proxy (both keep-alive,
#    from one client), and the double's fixed start-up delays for a pod.
# A private cluster (port $MESH_PORT, default 5512) and a private double, both stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
WARM=${1:-50}
COLD=${2:-5}
export MESH_PORT=${MESH_PORT:-5512}
. bench/lib.sh
BENCH_ON_EXIT=mesh_k8s_stop
bench_cluster 2
. test/lib/kubernetes.sh
mesh_k8s_start "$WORK/k8s"
psql -X -q -v cfg="$MESH_K8S_CONFIG" -v tok="$MESH_K8S_TOKEN_FILE" >/dev/null <<'SQL'
SET client_min_messages = warning;
SELECT mesh.backend_add('kubernetes', 'kubernetes', :'cfg'::jsonb);
SELECT mesh.backend_set_credential('kubernetes', trim(pg_read_file(:'tok'), E'\n'));
SELECT mesh.agent_set('bench-local', 'local');
SELECT mesh.agent_set('bench-kubernetes', 'kubernetes');
SQL

local_warm=$(bench_median_ms local warm "$WARM")
k8s_warm=$(bench_median_ms kubernetes warm "$WARM")
local_cold=$(bench_median_ms local cold "$COLD")
k8s_cold=$(bench_median_ms kubernetes cold "$COLD")

# the double's proxy hop: one pod, the same exec straight to its daemon and through the double
psql -X -qAt -c "SELECT 1 FROM mesh_acquire('bench-hop', 'bench-kubernetes', 'bench')" >/dev/null
psql -X -qAt -c "SELECT exit_code FROM mesh_exec('bench-hop', ARRAY['true'])" >/dev/null 2>&1
ref=$(psql -X -qAt -c "SELECT external_ref FROM mesh.workspaces WHERE run_id = 'bench-hop'")
hop=$(python3 - "$MESH_K8S_URL" "$MESH_K8S_CA_FILE" "$MESH_K8S_TOKEN_FILE" "$ref" "$WARM" <<'PY'
import http.client, json, ssl, statistics, sys, time, urllib.parse
url, ca, token_file, ref, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
token = open(token_file).read().strip()
host = urllib.parse.urlsplit(url)
api = http.client.HTTPSConnection(host.hostname, host.port, context=ssl.create_default_context(cafile=ca))
api.request("GET", "/_double/pods"); pods = json.loads(api.getresponse().read())
port = pods[f"mesh/{ref}"]["port"]
pod = json.loads((api.request("GET", f"/api/v1/namespaces/mesh/pods/{ref}", headers={"Authorization": f"Bearer {token}"}), api.getresponse().read())[1])
key = next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MESH_SANDBOXD_TOKEN")
body = json.dumps({"argv": ["true"], "timeout_ms": 10000, "exec_key": "bench", "max_output_bytes": 65536})
def median(conn, path, headers):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers); conn.getresponse().read()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)
direct = median(http.client.HTTPConnection("127.0.0.1", port), f"/v1/workspaces/{ref}/exec",
                {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
proxied = median(api, f"/api/v1/namespaces/mesh/pods/{ref}:7070/proxy/v1/workspaces/{ref}/exec",
                 {"Authorization": f"Bearer {token}", "X-Mesh-Sandboxd-Token": key, "Content-Type": "application/json"})
print(f"{direct:.2f} {proxied:.2f}")
PY
)
psql -X -qAt -c "SELECT mesh_release('bench-hop')" >/dev/null
read -r direct proxied <<<"$hop"

echo "warm exec  local (mesh-sandboxd):      ${local_warm} ms (median of $WARM)"
echo "warm exec  kubernetes (double):        ${k8s_warm} ms (median of $WARM)"
echo "cold first call  local:                ${local_cold} ms (median of $COLD)"
echo "cold first call  kubernetes (double):  ${k8s_cold} ms (median of $COLD)"
echo "the double's own overhead: an exec of true straight to the pod's daemon ${direct} ms, through"
echo "  the double's pods/proxy ${proxied} ms (Python TLS front + a second HTTP hop; a real API"
echo "  server's proxy costs differently); per pod it adds 50 ms of simulated scheduling, and"
echo "  Ready is seen at the end of the driver's 1 s watch window"
awk -v k="$k8s_warm" -v l="$local_warm" -v d="$direct" -v p="$proxied" 'BEGIN {
  printf "ratio      warm exec kubernetes / local:                 %.2fx\n", k / l
  printf "ratio      warm exec kubernetes without the double hop / local: %.2fx\n", (k - (p - d)) / l }'
awk -v k="$k8s_cold" -v l="$local_cold" 'BEGIN {
  printf "ratio      cold kubernetes / local:                      %.2fx\n", k / l }'
