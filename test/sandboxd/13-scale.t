#!/bin/bash
# Scale on the embedded path (non-root daemon, unix socket, the inherited soft open-files
# limit of 1024, network open as the default egress policy gives): 500 live workspaces at
# once, the oldest and newest usable, every one released, nothing left behind (the create
# times of the first and last tenth are printed). Then a daemon whose hard limit is tiny (200):
# creates past what its descriptors allow answer 503 out_of_resources and leave nothing.
. "$(dirname "$0")/lib.sh"
plan 14
COUNT=${MESH_SCALE_COUNT:-500}
ulimit -Sn 1024
sd_start_as postgres
like "$(grep 'open-files limit' "$SD_DIR/log")" "open-files limit [0-9]{4,}" "the daemon raises its open-files limit above 1024"
new_ws limits
is "$(stdout_of "$(run_sh limits 'ulimit -Sn')")" 1024 "its sandboxes keep the limit it inherited"
api DELETE /v1/workspaces/limits >/dev/null
wait_standby_ready   # the pool full at both counts: its standby holds descriptors too
fds_before=$(ls /proc/"$SD_PID"/fd | wc -l)
summary=$(timeout 600 python3 "$(dirname "$0")/scale.py" --socket "$SD_SOCKET" "$COUNT" 4 open)
diag "$summary"
is "$(field "$summary" .created)" "$COUNT" "$COUNT workspaces created"
is "$(field "$summary" .listed)" "$COUNT" "all $COUNT listed while live"
is "$(field "$summary" .errors)" 0 "no error (the oldest and the newest run commands)"
is "$(field "$summary" .released)" "$COUNT" "all released"
is "$(field "$summary" .left)" 0 "none listed after"
# a figure, not an assertion (timings on a shared machine are not a test)
diag "median create: $(field "$summary" .create_ms_first_tenth) ms for the first tenth, $(field "$summary" .create_ms_last_tenth) ms for the last"
wait_standby_ready
fds_after=$(ls /proc/"$SD_PID"/fd | wc -l)   # may be fewer: the readiness probe's connection
ok $(( fds_after > fds_before )) "every descriptor is given back ($fds_after open, $fds_before at start)"
left=($(sd_leftovers postgres))
is "${left[1]} ${left[2]}" "0 0" "no holder is left (beside the one standby)"

ulimit -n 200   # hard and soft: the daemon cannot raise it
sd_start_as postgres
wait_standby_ready   # the pool full at both counts: its standby holds descriptors too
fds_before=$(ls /proc/"$SD_PID"/fd | wc -l)
summary=$(timeout 300 python3 "$(dirname "$0")/scale.py" --socket "$SD_SOCKET" 40 4 open)
diag "$(echo "$summary" | cut -c1-300)"
created=$(field "$summary" .created)
ok $(( created < 1 || created >= 40 )) "at a hard limit of 200 some workspaces are created, not all ($created)"
like "$(field "$summary" '.first_errors[0]')" "503 .*out_of_resources" "the others answer 503 out_of_resources, with the reason"
kill -0 "$SD_PID"; ok $? "the daemon keeps running"
is "$(sd_leftovers postgres)" "0 0 0" "no directory and no holder is left (beside the one standby)"
wait_standby_ready
fds_after=$(ls /proc/"$SD_PID"/fd | wc -l)   # may be fewer: the readiness probe's connection
ok $(( fds_after > fds_before )) "every descriptor is given back ($fds_after open, $fds_before at start)"
finish
