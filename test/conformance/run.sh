#!/usr/bin/env bash
# test/conformance/run.sh: the same conformance files (test/conformance/[0-9]*.sql, pgTAP)
# against every backend in test/conformance/backends.list, as verbose TAP on stdout.
# Needs PGHOST/PGPORT/PGUSER/PGDATABASE (the cluster test/run.sh started, pgTAP installed).
# Starts the loopback probe the isolation tests must not reach.  Exit status: non-zero when
# any backend's run failed.  A backend that cannot run here is reported as "# SKIP ...".
set -uo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d /tmp/mesh-conformance.XXXXXX); chmod 755 "$work"
: > "$work/hits"; chmod 644 "$work/hits"
python3 probe.py "$work/hits" > "$work/port" 2> "$work/probe.err" &
probe=$!
trap 'kill $probe 2>/dev/null; wait $probe 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(head -1 "$work/port")
# positive control: the probe answers on the host, so a failure from inside means isolation
if ! curl -sf -m 3 "http://127.0.0.1:$port/" >/dev/null; then
  echo "# the loopback probe does not answer on the host; cannot run the isolation checks"; exit 1
fi
: > "$work/hits"

# expand ${VAR} in a config line; prints the reason and fails when a variable is unset
expand() {
  local text=$1 var
  for var in $(grep -o '\${[A-Za-z_][A-Za-z0-9_]*}' <<<"$text" | tr -d '${}' | sort -u); do
    if [ -z "${!var:-}" ]; then
      local why="${var}_SKIP"; echo "${!why:-$var is not set}"; return 1
    fi
    text=${text//\$\{$var\}/${!var}}
  done
  printf '%s' "$text"
}

status=0
while read -r name driver config; do
  case "$name" in ''|'#'*) continue ;; esac
  if [ "$driver" != - ]; then
    if ! cfg=$(expand "$config"); then
      echo "# SKIP backend $name: $cfg"; continue
    fi
    psql -X -qAt -v ON_ERROR_STOP=1 -v name="$name" -v driver="$driver" -v cfg="$cfg" \
      <<<"SELECT CASE WHEN EXISTS (SELECT 1 FROM mesh.backend_catalog WHERE name = :'name')
             THEN mesh.backend_configure(:'name', :'cfg'::jsonb)::text
             ELSE mesh.backend_add(:'name', :'driver', :'cfg'::jsonb)::text END" >/dev/null \
      || { echo "not ok - backend $name could not be registered"; status=1; continue; }
    credential_file="MESH_CREDENTIAL_FILE_$name"
    if [ -n "${!credential_file:-}" ]; then
      psql -X -qAt -v ON_ERROR_STOP=1 -v name="$name" -v file="${!credential_file}" \
        <<<"SELECT mesh.backend_set_credential(:'name', trim(pg_read_file(:'file'), E'\n'))" >/dev/null \
        || { echo "not ok - backend $name: its credential could not be set"; status=1; continue; }
    fi
  fi
  echo "# backend $name"
  pg_prove -v -S backend="$name" -S probe_port="$port" -S probe_hits="$work/hits" [0-9]*.sql || status=1
done < backends.list
exit $status
