#!/usr/bin/env bash
# test/lib/edge.sh: the Fly.io Sprites API TEST DOUBLE (test/edge/sprites_double.py) for the
# edge driver's tests.  Source it, then:
#   mesh_edge_start DIR   make an API token and start the double on a free loopback port over
#                         the installed mesh-sandboxd.  Exports MESH_EDGE_URL,
#                         MESH_EDGE_TOKEN_FILE (readable by postgres, for pg_read_file) and
#                         MESH_EDGE_CONFIG (a complete driver config).  Non-zero on failure.
#   mesh_edge_knobs JSON  set the double's timing knobs (create_delay_ms, wake_delay_ms,
#                         idle_sleep_ms)
#   mesh_edge_double PATH curl the double's test-only control (e.g. /_double/stats/NAME)
#   mesh_edge_stop        stop the double (and the daemon behind its sprites)
MESH_EDGE_DIR=""
MESH_EDGE_PID=""
MESH_EDGE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

mesh_edge_start() {
  local dir=$1 i
  mkdir -p "$dir"; chmod 755 "$dir"
  MESH_EDGE_DIR=$dir
  head -c 32 /dev/urandom | base64 | tr -d '/+=\n' > "$dir/token"
  chmod 644 "$dir/token"   # the test cluster's postgres reads it with pg_read_file
  rm -f "$dir/port"
  /usr/bin/python3 "$MESH_EDGE_ROOT/test/edge/sprites_double.py" --token-file "$dir/token" \
    --port-file "$dir/port" --daemon "$(pg_config --bindir)/mesh-sandboxd" --work "$dir" \
    > "$dir/double.log" 2>&1 &
  MESH_EDGE_PID=$!
  for i in $(seq 1 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
  [ -s "$dir/port" ] || { echo "the Sprites API double did not start: $(tail -3 "$dir/double.log")" >&2; return 1; }
  export MESH_EDGE_URL="http://127.0.0.1:$(cat "$dir/port")"
  export MESH_EDGE_TOKEN_FILE="$dir/token"
  export MESH_EDGE_CONFIG="{\"api_url\": \"$MESH_EDGE_URL\"}"
}

mesh_edge_knobs() {
  curl -sf -m 5 -X POST --data "$1" "$MESH_EDGE_URL/_double/knobs" >/dev/null
}

mesh_edge_double() {
  curl -s -m 10 -X POST "$MESH_EDGE_URL$1"
}

mesh_edge_stop() {
  local cg
  if [ -n "$MESH_EDGE_PID" ]; then
    kill -TERM "$MESH_EDGE_PID" 2>/dev/null; wait "$MESH_EDGE_PID" 2>/dev/null
    # the daemon behind the sprites leaves its cgroup parent (named by the double's pid) behind,
    # empty: removed here, as test/lib/cluster.sh does for the embedded daemon's
    for cg in /sys/fs/cgroup/*/"mesh-spritesdouble-$MESH_EDGE_PID"; do
      [ -d "$cg" ] || continue
      find "$cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
      rmdir "$cg" 2>/dev/null
    done
    MESH_EDGE_PID=""
  fi
  return 0
}
