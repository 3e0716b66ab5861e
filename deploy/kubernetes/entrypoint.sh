#!/bin/sh
# Entry point of the mesh-sandboxd pod image (deploy/kubernetes/Dockerfile).
#
# The kubernetes driver starts each pod with args "--single-workspace <ref>" and two env vars:
# MESH_SANDBOXD_TOKEN (the key the driver derived for this workspace) and MESH_SANDBOXD_PORT.
# The key goes to a file only the daemon reads (mode 0600) and out of the environment, then the
# daemon serves the one workspace on the pod's port.  The test double (test/kubernetes/) runs
# this same script with MESH_SANDBOXD_LISTEN/STATE_DIR/TOKEN_FILE/BIN/EXTRA_ARGS set.
set -eu
state=${MESH_SANDBOXD_STATE_DIR:-/var/lib/mesh-sandboxd}
token_file=${MESH_SANDBOXD_TOKEN_FILE:-/run/mesh-sandboxd/token}
: "${MESH_SANDBOXD_TOKEN:?the pod needs MESH_SANDBOXD_TOKEN}"
mkdir -p "$state" "$(dirname "$token_file")"
(umask 077 && printf '%s\n' "$MESH_SANDBOXD_TOKEN" > "$token_file")
unset MESH_SANDBOXD_TOKEN
# shellcheck disable=SC2086  # EXTRA_ARGS is a word list by design
exec "${MESH_SANDBOXD_BIN:-/usr/local/bin/mesh-sandboxd}" --state-dir "$state" \
  --listen "${MESH_SANDBOXD_LISTEN:-0.0.0.0:${MESH_SANDBOXD_PORT:-7070}}" \
  --token-file "$token_file" ${MESH_SANDBOXD_EXTRA_ARGS:-} "$@"
