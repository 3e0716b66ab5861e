#!/usr/bin/env bash
# test/lib/kubernetes.sh: the Kubernetes API-server TEST DOUBLE (test/kubernetes/
# apiserver_double.py) for the kubernetes driver's tests.  Source it, then:
#   mesh_k8s_start DIR   make a CA and a server certificate for 127.0.0.1 (openssl), a
#                        service-account token, and start the double on a free loopback port
#                        with namespace "mesh" and image "mesh-sandboxd:test" (whose entry
#                        point is deploy/kubernetes/entrypoint.sh over the installed
#                        mesh-sandboxd).  Exports MESH_K8S_URL, MESH_K8S_CA (the CA's PEM),
#                        MESH_K8S_CA_JSON (the same as a JSON string), MESH_K8S_TOKEN_FILE
#                        (readable by postgres, for pg_read_file), MESH_K8S_DENIED_TOKEN_FILE
#                        (a token the double authenticates but authorizes for nothing: 403),
#                        MESH_K8S_CA_FILE and
#                        MESH_K8S_CONFIG (a
#                        complete driver config).  Non-zero (and why, on stderr) on failure.
#   mesh_k8s_mode MODE   normal | error500 | hang (the double's test-only control)
#   mesh_k8s_api ARGS    curl to the double as the service account (e.g. -X DELETE PATH)
#   mesh_k8s_stop        stop the double; it destroys what its pods' daemons hold
MESH_K8S_DIR=""
MESH_K8S_PID=""
MESH_K8S_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

mesh_k8s_start() {
  local dir=$1 i
  mkdir -p "$dir"; chmod 755 "$dir"
  MESH_K8S_DIR=$dir
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=mesh-test-k8s-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null || { echo "openssl could not make a CA" >&2; return 1; }
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null &&
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$dir/san.ext" &&
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/san.ext" -out "$dir/server.pem" 2>/dev/null || { echo "openssl could not sign" >&2; return 1; }
  head -c 32 /dev/urandom | base64 | tr -d '/+=\n' > "$dir/token"
  head -c 32 /dev/urandom | base64 | tr -d '/+=\n' > "$dir/denied-token"
  chmod 644 "$dir/token" "$dir/denied-token"   # the test cluster's postgres reads them with pg_read_file
  rm -f "$dir/port"   # a port file left by an earlier double in DIR would be read before the new one's
  # Debian's python: python3-yaml (test/lib/deps.sh) is there for the double's admission checks
  /usr/bin/python3 "$MESH_K8S_ROOT/test/kubernetes/apiserver_double.py" --cert "$dir/server.pem" \
    --key "$dir/server.key" --token-file "$dir/token" --denied-token-file "$dir/denied-token" \
    --port-file "$dir/port" \
    --namespace mesh --image "mesh-sandboxd:test=$MESH_K8S_ROOT/deploy/kubernetes/entrypoint.sh" \
    --daemon "$(pg_config --bindir)/mesh-sandboxd" --work "$dir" > "$dir/double.log" 2>&1 &
  MESH_K8S_PID=$!
  for i in $(seq 1 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
  [ -s "$dir/port" ] || { echo "the API-server double did not start: $(tail -3 "$dir/double.log")" >&2; return 1; }
  export MESH_K8S_URL="https://127.0.0.1:$(cat "$dir/port")"
  export MESH_K8S_CA; MESH_K8S_CA=$(cat "$dir/ca.pem")
  export MESH_K8S_CA_JSON; MESH_K8S_CA_JSON=$(python3 -c 'import json,sys;print(json.dumps(open(sys.argv[1]).read()))' "$dir/ca.pem")
  export MESH_K8S_TOKEN_FILE="$dir/token" MESH_K8S_CA_FILE="$dir/ca.pem"
  export MESH_K8S_DENIED_TOKEN_FILE="$dir/denied-token"
  export MESH_K8S_CONFIG="{\"api_server\": \"$MESH_K8S_URL\", \"namespace\": \"mesh\", \"ca_bundle\": $MESH_K8S_CA_JSON, \"image\": \"mesh-sandboxd:test\"}"
}

mesh_k8s_api() {
  curl -s -m 10 --cacert "$MESH_K8S_CA_FILE" -H "Authorization: Bearer $(cat "$MESH_K8S_TOKEN_FILE")" \
    "${@:1:$#-1}" "$MESH_K8S_URL${!#}"
}

mesh_k8s_mode() {
  curl -sf -m 5 --cacert "$MESH_K8S_CA_FILE" -X POST --data "$1" "$MESH_K8S_URL/_double/mode" >/dev/null
}

mesh_k8s_stop() {
  if [ -n "$MESH_K8S_PID" ]; then
    kill -TERM "$MESH_K8S_PID" 2>/dev/null; wait "$MESH_K8S_PID" 2>/dev/null
    MESH_K8S_PID=""
  fi
  return 0
}
