#!/usr/bin/env bash
# test/lib/deps.sh: install the Debian 12 packages mesh_exec builds, runs and tests with.
# Idempotent: installs only what is missing. Needs root (sudo is used only when not root).
set -euo pipefail

MESH_PACKAGES=(
  build-essential pkg-config git ca-certificates curl
  postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
  libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev libseccomp-dev libcap-dev libkrb5-dev
  bubblewrap iproute2 procps psmisc python3 python3-psycopg2 jq e2fsprogs util-linux
  python3-yaml                 # k8s_manifests.t: the Kubernetes manifests, read as YAML
  strace                       # 19-standby.t: which umask calls the daemon makes
  btrfs-progs                  # mkfs.btrfs: --setup-host's workspaces filesystem (disk quotas)
  bc                           # bench/disk_quota.sh
  clang libclang-rt-14-dev     # sanitizer builds and fuzzers of mesh-sandboxd (CI)
  docker.io busybox-static
  openssl                      # the Kubernetes API-server test double's CA and certificate
  libssl-dev                   # src/repos/jwt.c: the GitHub App JWT, signed with libcrypto
  python3-cryptography         # test/repos/github_double.py: verifies the App JWT (RS256)
)

missing=()
for pkg in "${MESH_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # the packaged cluster is not used; tests start their own
  $SUDO pg_ctlcluster 15 main stop 2>/dev/null || true
fi

# npm installs the isolate runtime: the machine's Node.js and npm when it has them (Debian's
# npm package conflicts with a Node.js that bundles its own), else Debian's
if ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "installing: nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# the isolate runtime (Deno, from npm) and mesh-isolated, into its fixed prefix
"$(dirname "$0")/../../src/isolated/install.sh"
