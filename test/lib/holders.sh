# test/lib/holders.sh - what runs on the host for a mesh-sandboxd state dir, seen from the host
# alone (sourced by test/sandboxd/lib.sh and test/e2e/lib.sh).
#
# A holder's bwrap command line names the directory it was started for, which for a standby
# holder (docs/sandboxd.md) is its pool directory, also after a workspace adopted it and the
# directory was renamed. Its sandbox's mountinfo follows the rename: the directory mounted at
# /workspace is the one the holder serves now.

# holder_names STATE [USER]: one line per bubblewrap holder of state dir STATE (of USER's, if
# given), sorted: the name of the directory its sandbox has at /workspace -- a workspace id,
# or _standby-N for a standby no workspace took -- or "?" while its sandbox is still starting.
holder_names() {
  local pid child name
  for pid in $(pgrep ${2:+-u "$2"} -f "bwrap .*$1/workspaces/"); do
    child=$(pgrep -P "$pid" | head -1)
    # the bind mount's root: .../workspaces/<name>/files, or /<name>/files where workspaces/
    # is a filesystem of its own (--setup-host --disk-bytes), /<name>/store/files with disk
    # quotas (the workspace's quota slot)
    name=$([ -n "$child" ] && awk '$5 == "/workspace" { n = split($4, p, "/")
             if (n >= 4 && p[n] == "files" && p[n - 1] == "store") { print p[n - 2]; exit }
             if (n >= 3 && p[n] == "files") { print p[n - 1]; exit } }' "/proc/$child/mountinfo" 2>/dev/null)
    [ -d "/proc/$pid" ] && echo "${name:-?}"
  done | sort
}

# settled_holder_names STATE [USER]: holder_names once no holder is still starting (bounded:
# 10 s, then as it is).
settled_holder_names() {
  local names
  for _ in $(seq 1 100); do
    names=$(holder_names "$@")
    echo "$names" | grep -qx '?' || break
    sleep 0.1
  done
  echo "$names"
}

# workspace_holder_names STATE [USER]: settled_holder_names without the standby pool's.
workspace_holder_names() { settled_holder_names "$@" | grep -v '^_standby-' || true; }

# standby_holder_count STATE [USER]: how many holders are standbys no workspace took.
standby_holder_count() { settled_holder_names "$@" | grep -c '^_standby-' || true; }
