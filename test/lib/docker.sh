#!/usr/bin/env bash
# test/lib/docker.sh: a private dockerd for the tests, and a small local image built
# without any registry.  Source it, then:
#   mesh_docker_start DIR   start dockerd with everything under DIR (data, exec root,
#                           socket DIR/docker.sock, log DIR/dockerd.log); returns non-zero
#                           (and says why on stderr) when dockerd cannot run here
#   mesh_docker_image NAME  import NAME: busybox (static) + /etc/passwd for an unprivileged
#                           user 1000, /workspace and /run/mesh owned by it
#   mesh_docker_stop        stop that dockerd (and its containerd) and unmount what it left
# Safe under set -e: stopping never fails the caller.
# Nothing global is touched: no iptables rules, no bridge, no IP forwarding, no
# /var/run/docker.sock; DOCKER_HOST is exported for the docker CLI.

MESH_DOCKER_DIR=""
MESH_DOCKER_PID=""

mesh_docker_start() {
  local dir=$1
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "dockerd is not installed" >&2; return 1
  fi
  mkdir -p "$dir"; chmod 711 "$dir"
  MESH_DOCKER_DIR=$dir
  dockerd --iptables=false --ip6tables=false --bridge=none --ip-forward=false --ip-masq=false \
    --storage-driver=overlay2 --data-root "$dir/data" --exec-root "$dir/exec" \
    --pidfile "$dir/dockerd.pid" -H "unix://$dir/docker.sock" \
    --containerd-namespace "mesh-test" --containerd-plugins-namespace "mesh-test-plugins" \
    > "$dir/dockerd.log" 2>&1 &
  MESH_DOCKER_PID=$!
  export DOCKER_HOST="unix://$dir/docker.sock"
  for _ in $(seq 1 300); do
    if curl -sf -m 2 --unix-socket "$dir/docker.sock" http://localhost/_ping >/dev/null 2>&1; then
      # the postgres user (the extension's workers) must reach the socket
      chown postgres "$dir/docker.sock" 2>/dev/null || true
      return 0
    fi
    kill -0 "$MESH_DOCKER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "dockerd did not start; last log lines:" >&2
  tail -5 "$dir/dockerd.log" >&2
  mesh_docker_stop
  return 1
}

mesh_docker_image() {
  local name=$1 root
  local bb
  bb=$(command -v busybox) || { echo "busybox is not installed" >&2; return 1; }
  root=$(mktemp -d "$MESH_DOCKER_DIR/rootfs.XXXXXX")
  mkdir -p "$root"/{bin,etc,tmp,workspace,run/mesh,proc,sys,dev,usr/bin}
  cp "$bb" "$root/bin/busybox"
  # one link per applet the image needs; busybox --list knows them all
  for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln "$root/bin/busybox" "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/workspace:/bin/sh\n' > "$root/etc/passwd"
  printf 'root:x:0:\nagent:x:1000:\n' > "$root/etc/group"
  chown 1000:1000 "$root/workspace" "$root/run/mesh"
  chmod 1777 "$root/tmp"
  tar -C "$root" -c . | docker import - "$name" >/dev/null
  local rc=$?
  rm -rf "$root"
  return $rc
}

mesh_docker_stop() {
  [ -n "$MESH_DOCKER_PID" ] || return 0
  if kill -0 "$MESH_DOCKER_PID" 2>/dev/null; then
    # containers first, so nothing is left running under the private roots
    local ids
    ids=$(docker ps -aq 2>/dev/null || true)
    if [ -n "$ids" ]; then docker rm -f -v $ids >/dev/null 2>&1 || true; fi
    kill -TERM "$MESH_DOCKER_PID" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$MESH_DOCKER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$MESH_DOCKER_PID" 2>/dev/null || true
  fi
  wait "$MESH_DOCKER_PID" 2>/dev/null || true
  MESH_DOCKER_PID=""
  # overlay and shm mounts dockerd may leave behind under its private roots
  if [ -n "$MESH_DOCKER_DIR" ]; then
    { grep -o " $MESH_DOCKER_DIR/[^ ]*" /proc/mounts || true; } | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  return 0
}
