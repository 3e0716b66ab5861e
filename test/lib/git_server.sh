# test/lib/git_server.sh - the git server and credential-helper helpers of the checkout tests
# (sourced by test/e2e/checkout.t and test/e2e/repo_gitlab.t, after test/e2e/lib.sh).
# They read: $work (the test's directory), $GPORT (the git server's port), $api (the provider
# double's URL) and append the pids they start to the array pids.

# bare_repo NAME [BLOB-BYTES]: $work/src-NAME with a first commit (its README, and BLOB-BYTES
# random bytes in blob when given), cloned bare to $work/git/octo/NAME.git for the git server
bare_repo() {
  git init -q -b main "$work/src-$1"
  echo "$1" > "$work/src-$1/README"
  [ -z "${2:-}" ] || head -c "$2" /dev/urandom > "$work/src-$1/blob"
  git -C "$work/src-$1" add .
  git -C "$work/src-$1" -c user.name=t -c user.email=t@t commit -q -m "$1: first"
  mkdir -p "$work/git/octo"
  git clone -q --bare "$work/src-$1" "$work/git/octo/$1.git"
}

# git_server NAME [NETNS-PID]: test/repos/git_server.py on GPORT (in that namespace), serving
# $work/git, checking tokens with the double at $api; its log in $work/NAME.log
git_server() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/../repos/git_server.py" "$work/$1.port" "$GPORT" "$work/git" "$api" \
    "$work/$1.log" ${2:+"$2"} &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$work/$1.port" ] && return 0; sleep 0.1; done
  return 1
}

# in_sandbox RUN: the pid of RUN's sandbox holder (its network namespace is the sandbox's)
in_sandbox() {
  local ref
  ref=$(q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'")
  jq -r .holder_pid "$PGDIR/data/mesh_sandboxd/workspaces/$ref/meta.json"
}

# helper_ask RUN HOST PATH: what the credential helper in RUN answers for git's question, the
# password replaced by "(set)"
helper_ask() {
  q "SELECT stdout FROM mesh_exec('$1', ARRAY['sh', '-c',
      'printf \"protocol=http\\nhost=%s\\npath=%s\\n\\n\" \"\$1\" \"\$2\" | /workspace/.mesh/git-credential-mesh get |
       sed \"s/^password=.*/password=(set)/\"', 'sh', '$2', '$3'])"
}

# token_sha RUN REPOSITORY: the SHA-256 of the live token of RUN's REPOSITORY
token_sha() {
  q "SELECT encode(sha256(convert_to(token, 'UTF8')), 'hex') FROM mesh.repository_tokens
      WHERE run_id = '$1' AND repository = '$2' AND revoked_at IS NULL ORDER BY id DESC LIMIT 1"
}

# status_with USER SHA256 REPOSITORY: the host-side git server's HTTP status for USER and the
# token whose SHA-256 is given (from its row, or from $work/held-SHA256 once the row forgot it)
status_with() {
  local value
  value=$(q "SELECT token FROM mesh.repository_tokens WHERE encode(sha256(convert_to(token, 'UTF8')), 'hex') = '$2'")
  [ -n "$value" ] || value=$(cat "$work/held-$2" 2>/dev/null)
  printf 'user = "%s:%s"\n' "$1" "$value" |
    curl -s -K - -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GPORT/$3.git/info/refs?service=git-upload-pack"
}
