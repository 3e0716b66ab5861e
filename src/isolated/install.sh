#!/usr/bin/env bash
# src/isolated/install.sh: install the isolate runtime (Deno, from npm) and mesh-isolated.
#
# Deno comes from the npm registry (package "deno", whose binary is the optional
# dependency @deno/linux-x64-glibc), pinned, into a fixed prefix the extension's
# setting mesh.isolate_runtime names by default.  The host's two TypeScript files
# are copied beside it.  Idempotent.  Usage: src/isolated/install.sh [PREFIX]
set -euo pipefail
PREFIX=${1:-${MESH_ISOLATE_PREFIX:-/usr/local/lib/mesh-isolated}}
DENO_VERSION=2.9.6
HERE=$(cd "$(dirname "$0")" && pwd)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

if ! "$PREFIX/deno" --version 2>/dev/null | grep -q "^deno $DENO_VERSION "; then
  $SUDO mkdir -p "$PREFIX/npm"
  $SUDO npm install --silent --no-audit --no-fund --prefix "$PREFIX/npm" "deno@$DENO_VERSION" >/dev/null
  $SUDO ln -sf "$PREFIX/npm/node_modules/@deno/linux-x64-glibc/deno" "$PREFIX/deno"
fi
$SUDO rm -f "$PREFIX/isolate_worker.ts"   # the Worker-based host of an earlier build
$SUDO install -m 0644 "$HERE/isolated.ts" "$HERE/isolate_child.ts" "$PREFIX/"
$SUDO install -m 0755 "$HERE/mesh-isolated" "$PREFIX/"
