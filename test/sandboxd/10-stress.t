#!/bin/bash
# Concurrency: many clients at once, each on its own workspaces, mixed operations (acquire,
# write, exec, read, describe, release); every answer must belong to its own request (ids,
# nonces, paths, outcomes). Bounded: MESH_STRESS_CLIENTS (16) x MESH_STRESS_SECONDS (20).
. "$(dirname "$0")/lib.sh"
plan 10
sd_start
CLIENTS=${MESH_STRESS_CLIENTS:-16}
SECONDS_=${MESH_STRESS_SECONDS:-20}
summary=$(timeout $((SECONDS_ + 240)) python3 "$(dirname "$0")/stress.py" "$SD_URL" "$SD_TOKEN" \
          "$CLIENTS" "$SECONDS_")
diag "$summary"
turns=$(field "$summary" .turns)
ok $(( ${turns:-0} < CLIENTS )) "$CLIENTS clients completed $turns turns in ${SECONDS_}s"
is "$(field "$summary" .errors)" 0 "every answer belonged to its own request (no error, no foreign id or nonce)"
kill -0 "$SD_PID"; ok $? "the daemon is still running"
is "$(field "$(api GET /v1/workspaces)" '.workspaces | length')" 0 "every workspace was released"
is "$(find "$SD_STATE/workspaces" -mindepth 1 -maxdepth 1 | wc -l)" 0 "no workspace directory is left"
is "$(pgrep -fc "bwrap .*$SD_DIR/")" 0 "no holder is left"

# all clients on one workspace: acquire, exec and release race on the same id
summary=$(timeout $((SECONDS_ / 2 + 240)) python3 "$(dirname "$0")/stress.py" "$SD_URL" "$SD_TOKEN" \
          8 $((SECONDS_ / 4 + 1)) none shared)
diag "$summary"
turns=$(field "$summary" .turns)
ok $(( ${turns:-0} < 8 )) "8 clients on one workspace completed $turns turns"
is "$(field "$summary" .errors)" 0 "every answer is one a lone client could get (no 5xx, own nonce)"
api DELETE /v1/workspaces/st-shared >/dev/null
is "$(find "$SD_STATE/workspaces" -mindepth 1 -maxdepth 1 | wc -l)" 0 "after the last release no directory is left"
is "$(pgrep -fc "bwrap .*$SD_DIR/")" 0 "and no holder"
finish
