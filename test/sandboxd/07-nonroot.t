#!/bin/bash
# The embedded mode: a non-root daemon (the postgres OS user) on a unix socket. It declares
# resource_limits and compute_metering false, and isolation still holds.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/isolation_checks.sh"
id postgres >/dev/null 2>&1 || skip_all "no postgres user"
plan 39
sd_start_as postgres

is "$(stat -c '%a %U' "$SD_SOCKET")" "600 postgres" "socket is mode 0600, owned by the daemon's user"
caps=$(api GET /v1/capabilities)
is "$(field "$caps" '[.capabilities.resource_limits,.capabilities.compute_metering,.capabilities.hibernate]|map(tostring)|join(",")')" \
   "false,false,true" "non-root: resource_limits and compute_metering false"
new_ws iso1
new_ws iso2
r=$(exec_json iso1 '{"argv":["true"]}')
is "$(field "$r" '[.exit_code,.cpu_ms,.memory_peak_bytes]|map(tostring)|join(",")')" "0,null,null" \
   "cpu_ms and memory_peak_bytes are null without cgroups"
EXPECT_UID=$(id -u postgres)
isolation_checks

M=$((RANDOM % 9000 + 1000))
r=$(exec_json iso1 '{"argv":["sh","-c","(sleep '"$M"'1 &); setsid sh -c \"sleep '"$M"'2 &\"; sleep '"$M"'3"],"timeout_ms":800}')
is "$(field "$r" .timed_out)" true "timeout without cgroups"
is "$(pgrep -u postgres -f "sleep ${M}[123]" | wc -l)" 0 "no process of the tree survives (per-exec pid namespace)"
r=$(run_sh iso1 'sleep '"$M"'4 & echo bg')
is "$(pgrep -u postgres -f "sleep ${M}4" | wc -l)" 0 "background leftovers die with the exec"
api PUT "/v1/workspaces/iso1/files?path=x/y.txt" "hello" >/dev/null
is "$(api GET "/v1/workspaces/iso1/files?path=x/y.txt")" hello "file round trip as non-root"
r=$(api DELETE /v1/workspaces/iso1 '{"prefer":"hibernate"}')
api PUT /v1/workspaces/iso1 >/dev/null
is "$(stdout_of "$(exec_json iso1 '{"argv":["cat","x/y.txt"]}')")" hello "hibernate and wake as non-root"
sd_stop TERM
sd_launch() {   # relaunch as postgres
    "$(command -v setpriv)" --reuid=postgres --regid="$(id -g postgres)" --init-groups -- \
        "$SANDBOXD" "${SD_ARGS[@]}" 2>>"$SD_DIR/log" &
    SD_PID=$!; SD_PIDS+=("$SD_PID"); sd_wait_ready
}
sd_launch
is "$(stdout_of "$(exec_json iso1 '{"argv":["cat","x/y.txt"]}')")" hello "restart as non-root re-adopts"

# --hibernate-on-exit (for embedding: no sandbox process outlives the database's daemon)
sd_stop TERM
SD_ARGS+=(--hibernate-on-exit)
sd_launch
holder=$(jq -r .holder_pid "$SD_STATE/workspaces/iso1/meta.json")
sd_stop TERM
kill -0 "$holder" 2>/dev/null; ok $((! $?)) "--hibernate-on-exit: SIGTERM stops the holders"
sd_launch
is "$(field "$(api GET /v1/workspaces/iso1)" .state)" hibernated "they come back hibernated"
api PUT /v1/workspaces/iso1 >/dev/null
is "$(stdout_of "$(exec_json iso1 '{"argv":["cat","x/y.txt"]}')")" hello "and wake with their files"
finish
