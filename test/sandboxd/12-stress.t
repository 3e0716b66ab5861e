#!/bin/bash
# Concurrency: many clients at once, each on its own workspaces, mixed operations (acquire,
# write, exec, read, describe, release); every answer must belong to its own request (ids,
# nonces, paths, outcomes), and the daemon keeps no memory per workspace once released; then
# clients racing on one workspace. Bounded: MESH_STRESS_CLIENTS (16) x MESH_STRESS_SECONDS (20).
. "$(dirname "$0")/lib.sh"
plan 11
sd_start
CLIENTS=${MESH_STRESS_CLIENTS:-16}
SECONDS_=${MESH_STRESS_SECONDS:-20}
# two halves (network open where the daemon can enforce it, so every workspace has its egress
# proxy); the daemon's memory after the second must not have grown with its workspaces
NET=$([ "$(field "$(api GET /v1/capabilities)" .capabilities.egress_control)" = true ] && echo open || echo none)
rss() { awk '/^VmRSS/ {print $2}' /proc/"$SD_PID"/status; }
half() { timeout $((SECONDS_ + 240)) python3 "$(dirname "$0")/stress.py" "$SD_URL" "$SD_TOKEN" \
         "$CLIENTS" $((SECONDS_ / 2)) "$NET"; }
first=$(half); rss1=$(rss)
second=$(half); rss2=$(rss)
diag "network $NET: $first"
diag "$second"
turns=$(( $(field "$first" .turns) + $(field "$second" .turns) ))
ok $(( ${turns:-0} < CLIENTS )) "$CLIENTS clients completed $turns turns in ${SECONDS_}s"
is "$(( $(field "$first" .errors) + $(field "$second" .errors) ))" 0 "every answer belonged to its own request (no error, no foreign id or nonce)"
kill -0 "$SD_PID"; ok $? "the daemon is still running"
is "$(field "$(api GET /v1/workspaces)" '.workspaces | length')" 0 "every workspace was released"
left=($(sd_leftovers))
is "${left[0]}" 0 "no workspace directory is left"
is "${left[1]} ${left[2]}" "0 0" "no holder is left (beside the one standby)"
made=$(field "$second" .turns)
# well under the ~85 KB per workspace once kept; allocator noise is a few hundred KB at most
if [ -n "${MESH_SANDBOXD:-}" ]; then   # a sanitizer's allocator keeps freed memory on purpose
    skip "memory growth is LeakSanitizer's to judge with $MESH_SANDBOXD"
else
    ok $(( (rss2 - rss1) > 1024 + 8 * made )) "the daemon's memory did not grow with its workspaces (${rss1} -> ${rss2} kB over $made workspaces)"
fi

# all clients on one workspace: acquire, exec and release race on the same id
summary=$(timeout $((SECONDS_ / 2 + 240)) python3 "$(dirname "$0")/stress.py" "$SD_URL" "$SD_TOKEN" \
          8 $((SECONDS_ / 4 + 1)) none shared)
diag "$summary"
turns=$(field "$summary" .turns)
ok $(( ${turns:-0} < 8 )) "8 clients on one workspace completed $turns turns"
is "$(field "$summary" .errors)" 0 "every answer is one a lone client could get (no 5xx, own nonce)"
api DELETE /v1/workspaces/st-shared >/dev/null
left=($(sd_leftovers))
is "${left[0]}" 0 "after the last release no directory is left"
is "${left[1]} ${left[2]}" "0 0" "and no holder (beside the one standby)"
finish
