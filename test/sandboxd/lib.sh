# lib.sh - helpers for the mesh-sandboxd TAP tests (sourced by every *.t).
#
# sd_start starts a daemon on a private temp state dir, port, token and cgroup name; an EXIT
# trap stops it and removes every holder, cgroup and directory it created, even when a test
# fails half way. api/api_json wrap curl (always with a timeout) and TAP helpers print
# ok/not ok lines.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# MESH_SANDBOXD selects another build of the daemon (e.g. the sanitizer ones, see .ci/run).
SANDBOXD="${MESH_SANDBOXD:-$REPO/src/sandboxd/mesh-sandboxd}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/holders.sh"
SD_DIRS=()
SD_PIDS=()
SD_CGROUPS=()

if [ ! -x "$SANDBOXD" ]; then
    make -s -C "$REPO/src/sandboxd" >/dev/null || { echo "Bail out! build failed"; exit 1; }
fi

# --- TAP: test/lib/tap.sh (plan, ok, is, like, skip REASON COUNT, skip_all, diag) ---
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

# --- daemon lifecycle ---
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# sd_start [daemon flags...]: root TCP daemon; sets SD_DIR SD_URL SD_TOKEN SD_PID SD_STATE.
sd_start() {
    SD_DIR=$(mktemp -d /tmp/mesh-sd-test.XXXXXX)
    chmod 711 "$SD_DIR"   # the sandbox user must traverse it to reach the state dir
    SD_DIRS+=("$SD_DIR")
    SD_STATE="$SD_DIR/state"
    SD_TOKEN="tok-$RANDOM$RANDOM$RANDOM"
    echo "$SD_TOKEN" > "$SD_DIR/token"
    chmod 600 "$SD_DIR/token"
    SD_PORT=$(free_port)
    SD_URL="http://127.0.0.1:$SD_PORT"
    SD_CGROUP="mesh-test-$$-$RANDOM"
    SD_CGROUPS+=("$SD_CGROUP")
    SD_ARGS=(--state-dir "$SD_STATE" --listen "127.0.0.1:$SD_PORT" --token-file "$SD_DIR/token"
             --cgroup-name "$SD_CGROUP" "$@")
    sd_launch
}

# sd_launch: (re)starts the daemon with SD_ARGS and waits until it answers.
sd_launch() {
    "$SANDBOXD" "${SD_ARGS[@]}" 2>>"$SD_DIR/log" &
    SD_PID=$!
    SD_PIDS+=("$SD_PID")
    sd_wait_ready
}

# sd_wait_ready: polls capabilities (bounded) until the daemon answers.
sd_wait_ready() {
    for _ in $(seq 1 100); do
        if [ -n "$SD_SOCKET" ]; then
            curl -s -m 2 --unix-socket "$SD_SOCKET" http://sd/v1/capabilities >/dev/null 2>&1 && return 0
        else
            curl -s -m 2 -H "Authorization: Bearer $SD_TOKEN" "$SD_URL/v1/capabilities" >/dev/null 2>&1 && return 0
        fi
        sleep 0.1
    done
    echo "Bail out! daemon did not start"; cat "$SD_DIR/log" >&2; exit 1
}

# sd_stop [SIGNAL]: stops the current daemon (default TERM) and waits for it.
sd_stop() {
    kill -"${1:-TERM}" "$SD_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$SD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SD_PID" 2>/dev/null
    wait "$SD_PID" 2>/dev/null
    return 0
}

# Kills holders recorded under a state dir (after the daemon is gone).
sd_kill_holders() {
    local meta pid
    for meta in "$1"/workspaces/*/meta.json; do
        [ -f "$meta" ] || continue
        pid=$(jq -r '.holder_pid // 0' "$meta" 2>/dev/null)
        [ "${pid:-0}" -gt 0 ] && kill -KILL "$pid" 2>/dev/null
    done
    return 0
}

# Kills every bubblewrap sandbox whose command line names DIR (and its sandbox process), also
# those a daemon was still starting when it died.
sd_kill_sandboxes_under() {
    local pid
    for pid in $(pgrep -f "bwrap .*$1/"); do
        pkill -KILL -P "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done
    return 0
}

# EXIT trap: daemons, holders, cgroups, directories.
sd_cleanup() {
    local pid dir cg ctl
    # TERM first (bounded): a daemon that exits normally runs LeakSanitizer in the ASan build
    for pid in "${SD_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${SD_PIDS[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    done
    for dir in "${SD_DIRS[@]}"; do
        sd_kill_holders "$dir/state"
        sd_kill_holders "$dir/run/state"
        sd_kill_sandboxes_under "$dir"
    done
    sleep 0.2
    for cg in "${SD_CGROUPS[@]}"; do
        for ctl in memory pids cpu cpuacct; do
            [ -d "/sys/fs/cgroup/$ctl/$cg" ] || continue
            for _ in $(seq 1 50); do
                find "/sys/fs/cgroup/$ctl/$cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
                rmdir "/sys/fs/cgroup/$ctl/$cg" 2>/dev/null && break
                sleep 0.1
            done
        done
    done
    for dir in "${SD_DIRS[@]}"; do   # filesystems --setup-host mounted for a test
        { grep -o " $dir/[^ ]*" /proc/mounts || true; } | sort -r |
            while read -r m; do umount -l "$m" 2>/dev/null; done
        rm -rf "$dir"
    done
}
trap sd_cleanup EXIT
trap "exit 130" INT TERM HUP   # run the EXIT trap on interruption too

# --- HTTP ---
# api METHOD PATH [BODY|@FILE] -> body on stdout; HTTP status kept for `status` (per shell:
# concurrent calls do not share the response file; `status` is the last one finished).
api() {
    local method=$1 path=$2 body=${3-} resp base
    resp=$(mktemp "$SD_DIR/resp.XXXXXX")
    local args=(-s -m 60 -X "$method" -o "$resp" -w '%{http_code}')
    if [ -n "$SD_SOCKET" ]; then args+=(--unix-socket "$SD_SOCKET"); base="http://sd"
    else args+=(-H "Authorization: Bearer $SD_TOKEN"); base=$SD_URL; fi
    [ -n "$body" ] && args+=(--data-binary "$body" -H 'Content-Type: application/json')
    curl "${args[@]}" "$base$path" > "$resp.status" 2>/dev/null
    cat "$resp"
    mv -f "$resp.status" "$SD_DIR/status"   # atomic: a concurrent call never reads it half written
    rm -f "$resp"
}
status() { cat "$SD_DIR/status" 2>/dev/null; }

# exec_json WS JSON -> exec response
exec_json() { api POST "/v1/workspaces/$1/exec" "$2"; }
# run_sh WS SCRIPT -> exec response of sh -c SCRIPT
run_sh() { exec_json "$1" "$(jq -nc --arg s "$2" '{argv:["sh","-c",$s]}')"; }
# stdout_of RESPONSE -> decoded stdout
stdout_of() { echo "$1" | jq -r '.stdout_b64' | base64 -d; }
stderr_of() { echo "$1" | jq -r '.stderr_b64' | base64 -d; }
field() { echo "$1" | jq -r "$2"; }
# exec_tail WS BODY -> the JSON line of an output "tail" answer; the raw stdout and stderr
# after it land in $SD_DIR/tail.out and $SD_DIR/tail.err, and "rest" in the JSON says how many
# bytes the body held beyond the JSON line and both streams (0 when well framed)
exec_tail() {
    exec_json "$1" "$2" > "$SD_DIR/tail.body"
    frame_split "$SD_DIR/tail.body" "$SD_DIR/tail.out" "$SD_DIR/tail.err"
}
# frame_split BODY OUT ERR: splits a framed answer (JSON line, "\n", stdout_kept then
# stderr_kept raw bytes) into OUT and ERR; prints the JSON line with "rest" added
frame_split() {
    local body=$1 line n o e
    line=$(head -n 1 "$body"); n=$(head -n 1 "$body" | wc -c)
    o=$(echo "$line" | jq -r '.stdout_kept // 0'); e=$(echo "$line" | jq -r '.stderr_kept // 0')
    tail -c +$((n + 1)) "$body" | head -c "$o" > "$2"
    tail -c +$((n + o + 1)) "$body" | head -c "$e" > "$3"
    echo "$line" | jq -c --argjson rest $(( $(wc -c < "$body") - n - o - e )) '. + {rest: $rest}'
}

finish() { exit $((TAP_FAILED > 0)); }

# sd_prepare_as USER [daemon flags...]: directories and flags of a non-root daemon on a unix
# socket (how the extension embeds it), not started yet.
sd_prepare_as() {
    local user=$1; shift
    SD_DIR=$(mktemp -d /tmp/mesh-sd-test.XXXXXX)
    SD_DIRS+=("$SD_DIR")
    chmod 711 "$SD_DIR"
    mkdir "$SD_DIR/run" && chown "$user" "$SD_DIR/run"
    SD_STATE="$SD_DIR/run/state"
    SD_SOCKET="$SD_DIR/run/sandboxd.sock"
    SD_ARGS=(--state-dir "$SD_STATE" --socket "$SD_SOCKET" "$@")
}

# sd_launch_as USER: starts the prepared daemon as USER; setpriv execs the daemon directly so
# SD_PID is the daemon itself.
sd_launch_as() {
    "$(command -v setpriv)" --reuid="$1" --regid="$(id -g "$1")" --init-groups -- \
        "$SANDBOXD" "${SD_ARGS[@]}" 2>>"$SD_DIR/log" &
    SD_PID=$!
    SD_PIDS+=("$SD_PID")
    sd_wait_ready
}

# sd_start_setup_as USER DISK_BYTES: a non-root daemon on a host its --setup-host prepared (a
# delegated cgroup subtree, a workspaces filesystem of DISK_BYTES), started; bails out when the
# set-up fails.
sd_start_setup_as() {
    sd_prepare_as "$1"
    local cg="mesh-test-$$-$RANDOM"
    SD_CGROUPS+=("$cg")
    "$SANDBOXD" --setup-host "$1" --state-dir "$SD_STATE" --cgroup-name "$cg" \
        --disk-bytes "$2" > "$SD_DIR/setup.out" 2>&1 || { echo "Bail out! setup-host failed"; exit 1; }
    sd_launch_as "$1"
}

# sd_start_as USER [daemon flags...]: prepares and starts a non-root daemon.
sd_start_as() {
    sd_prepare_as "$@"
    sd_launch_as "$1"
}

# wait_standby_ready: waits (bounded, 10 s) until the current daemon's log says its last standby
# event was a standby holder made ready (not an adoption): the next new workspace of the default
# tier takes it. False when none came.
wait_standby_ready() {
    for _ in $(seq 1 100); do
        grep -E "standby _standby-[0-9]+: holder pid [0-9]+ ready|adopted standby" "$SD_DIR/log" |
            tail -1 | grep -q " ready$" && return 0
        sleep 0.1
    done
    return 1
}

# sd_leftovers [USER]: "DIRS HOLDERS STANDBYS" under the current state dir: workspace directories
# and holders serving a workspace (test/lib/holders.sh), then standby holders beyond the pool's
# one (--standby default): "0 0 0" once every workspace is released and nothing leaked.
sd_leftovers() {
    local standbys
    standbys=$(standby_holder_count "$SD_STATE" "$@")
    echo "$(find "$SD_STATE/workspaces" -mindepth 1 -maxdepth 1 ! -name '_standby-*' | wc -l)" \
         "$(workspace_holder_names "$SD_STATE" "$@" | wc -l)" "$(( standbys > 1 ? standbys - 1 : 0 ))"
}

# new_ws ID [BODY]: acquires a workspace, bails out when that fails.
new_ws() {
    local out
    out=$(api PUT "/v1/workspaces/$1" "${2-}")
    [ "$(status)" = 200 ] || { echo "Bail out! acquire $1 failed: $out"; cat "$SD_DIR/log" >&2; exit 1; }
}

# err_code RESPONSE -> .error.code
err_code() { echo "$1" | jq -r '.error.code // empty' 2>/dev/null; }
