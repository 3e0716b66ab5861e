#!/bin/bash
# Errors that say what happened: a command that never started carries spawn_error (argument
# list too long is not "command not found"), an unreadable file is permission_denied naming
# its mode, a file name over 255 bytes is 400 name_too_long (not 500 internal).
. "$(dirname "$0")/lib.sh"
plan 13
sd_start
new_ws er

# big_exec FILE ARG_BYTES ARGS: an exec body with ARGS arguments of ARG_BYTES each (too large
# for a command line of this shell: written to a file)
big_exec() {
    python3 -c 'import json, sys; n, k = int(sys.argv[1]), int(sys.argv[2])
print(json.dumps({"argv": ["sh", "-c", "echo ran"] + ["a" * n] * k}))' "$2" "$3" > "$1"
}
big_exec "$SD_DIR/one.json" 200000 1
r=$(exec_json er "@$SD_DIR/one.json")
is "$(field "$r" '[.exit_code,.spawn_error.code]|map(tostring)|join(" ")')" "127 argument_list_too_long" \
   "one argument over the kernel's limit: spawn_error argument_list_too_long"
like "$(field "$r" .spawn_error.message)" 'too long.*"sh" \([0-9]+ bytes\)' "its message names the command and the size"
like "$(stderr_of "$r")" "Argument list too long" "stderr no longer claims 'command not found'"
big_exec "$SD_DIR/all.json" 100000 40
r=$(exec_json er "@$SD_DIR/all.json")
is "$(field "$r" .spawn_error.code)" argument_list_too_long "arguments over the total limit: the same"
r=$(exec_json er '{"argv":["no-such-program-xyz"]}')
is "$(field "$r" '[.exit_code,.spawn_error.code]|map(tostring)|join(" ")')" "127 command_not_found" \
   "a missing program: exit 127 and spawn_error command_not_found"
r=$(exec_json er '{"argv":["/workspace"]}')
is "$(field "$r" .spawn_error.code)" permission_denied "a non-executable: spawn_error permission_denied"
r=$(exec_json er '{"argv":["true"],"dir":"missing"}')
is "$(field "$r" .spawn_error.code)" bad_dir "a missing working directory: spawn_error bad_dir"
r=$(run_sh er 'exit 127')
is "$(field "$r" '[.exit_code,(.spawn_error|tostring)]|map(tostring)|join(" ")')" "127 null" \
   "a command that itself exits 127 has no spawn_error"

run_sh er 'echo secret > zero.txt; chmod 0 zero.txt; mkdir shut; echo x > shut/f; chmod 0 shut' >/dev/null
r=$(api GET "/v1/workspaces/er/files?path=zero.txt")
is "$(status) $(err_code "$r")" "403 permission_denied" "a mode-0 file: 403 permission_denied"
like "$(field "$r" .error.message)" 'mode 0000' "the message names the mode"
r=$(api GET "/v1/workspaces/er/files?path=shut/f")
is "$(status) $(err_code "$r")" "403 permission_denied" "a file under a mode-0 directory: permission_denied"
long=$(printf 'n%.0s' $(seq 1 300))
r=$(api PUT "/v1/workspaces/er/files?path=$long" "x")
is "$(status) $(err_code "$r")" "400 name_too_long" "writing a 300-character name: 400 name_too_long"
r=$(api GET "/v1/workspaces/er/files?path=$long")
is "$(status) $(err_code "$r")" "400 name_too_long" "reading one: the same"
finish
