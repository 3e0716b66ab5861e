#!/bin/bash
# Project-state snapshots on the embedded default (the daemon as postgres, no root): capture a
# workspace into an immutable tree, start workspaces as a copy-on-write view of it (overlay in
# the workspace's own user namespace), keep that across hibernate/wake and daemon restarts
# (SIGKILL included), refuse what would break it, and clean up what a killed capture left. A
# small filesystem of its own shows that a capture that does not fit leaves nothing behind.
# The last part runs the same cycle on a root daemon (sandboxes as nobody).
. "$(dirname "$0")/lib.sh"
id postgres >/dev/null 2>&1 || skip_all "no postgres user"
plan 46
sd_start_setup_as postgres $((48 << 20))
SNAPS="$SD_STATE/workspaces/.snapshots"
is "$(field "$(api GET /v1/capabilities)" .capabilities.snapshot)" true "snapshot is declared as postgres"

# --- capture ---
new_ws a
r=$(run_sh a 'mkdir -p dep/lib && echo one > dep/lib/f && echo top > t && chmod 640 t &&
          ln -s /etc/hostname host && ln -s '"$SD_STATE"'/host.json outside && mkfifo pipe')
is "$(field "$r" .exit_code)" 0 "the workspace's files to capture are written"
[ "$(field "$r" .exit_code)" = 0 ] ||
    diag "the exec answered: $r; the log: $(grep 'workspace a:' "$SD_DIR/log" | tr '\n' ' ')"
r=$(api PUT /v1/snapshots/s1 '{"workspace":"a","labels":{"mesh.project":"p1"}}')
is "$(status)" 200 "capture answers 200"
is "$(field "$r" '[.id,.state,.workspace,.files,.bytes,.captured]|map(tostring)|join(",")')" \
   "s1,ready,a,5,8,true" "the snapshot says what it holds (files, bytes) and where it came from"
is "$(stat -c %a "$SNAPS/s1/tree/t")" 640 "modes are kept"
is "$(readlink "$SNAPS/s1/tree/outside")" "$SD_STATE/host.json" \
   "a symlink leading out of the workspace is captured as a link, never as what it points to"
r=$(api PUT /v1/snapshots/s1 '{"workspace":"a"}')
is "$(field "$r" '[.captured,.files]|map(tostring)|join(",")')" "false,5" "capturing an existing id is idempotent"
r=$(api PUT /v1/snapshots/s9 '{}')
is "$(status) $(err_code "$r")" "400 bad_request" "capture without a workspace is refused"
r=$(api PUT /v1/snapshots/s9 '{"workspace":"nope"}')
is "$(status) $(err_code "$r")" "404 workspace_not_found" "capture of an unknown workspace is refused"
r=$(api PUT '/v1/snapshots/-bad' '{"workspace":"a"}')
is "$(status) $(err_code "$r")" "400 bad_snapshot_id" "a bad snapshot id is refused"
is "$(ls "$SNAPS" | grep -c '^\.capture-')" 0 "refused captures leave no staging directory"

# --- a command racing the capture cannot make it read what the sandbox cannot ---
# it swaps an entry between a file of its own and symlinks to a host file (absolute, and
# through /proc) while captures run; a capture never follows a link, so every regular file in
# a snapshot holds the command's own bytes
secret="$SD_STATE/host.json"
exec_json a "$(jq -nc --arg t "$secret" '{argv:["sh","-c","end=$(($(date +%s)+6)); while [ $(date +%s) -lt $end ]; do for n in 1 2 3 4 5 6 7 8; do ln -sfn \($t) r$n; ln -sfn /proc/1/root\($t) r$n; rm -f r$n; echo mine > r$n; rm -f r$n; ln -sfn / d$n; rm -f d$n; mkdir d$n; echo mine > d$n/f; rm -rf d$n; done; done"]}')" >/dev/null &
racer=$!
leaked=0 seen=0
for i in 1 2 3 4 5; do
    api PUT "/v1/snapshots/race$i" '{"workspace":"a"}' >/dev/null
    t="$SNAPS/race$i/tree"
    [ -d "$t" ] || continue
    while IFS= read -r -d '' f; do
        case "$(cat "$f")" in mine|"") ;; *) leaked=$((leaked + 1)); diag "leaked: $f: $(head -c 80 "$f")" ;; esac
        seen=$((seen + 1))
    done < <(find "$t" -maxdepth 2 -type f \( -path "$t/r[1-8]" -o -path "$t/d[1-8]/f" \) -print0)
    api DELETE "/v1/snapshots/race$i" >/dev/null
done
wait "$racer"
diag "$seen racing files were captured"
is "$leaked" 0 "captures racing a command that swaps files for symlinks never copy a host file"

# --- workspaces on the snapshot ---
before=$(cd "$SNAPS/s1/tree" && find . -printf '%p %s %m\n' | sort | md5sum)
r=$(api PUT /v1/workspaces/b '{"snapshot":"s1"}')
is "$(status) $(field "$r" .snapshot)" "200 s1" "a workspace starts from the snapshot"
r=$(run_sh b 'cat dep/lib/f t; readlink host; echo two > t; echo new > dep/lib/g; rm dep/lib/f; id -u')
is "$(stdout_of "$r")" "$(printf 'one\ntop\n/etc/hostname\n%s' "$(id -u postgres)")" \
   "it sees the snapshot's tree at its first exec, as the sandbox user"
r=$(run_sh b 'cat t; ls dep/lib; grep -c " /workspace overlay " /proc/self/mounts')
is "$(stdout_of "$r")" "$(printf 'two\ng\n1')" "its writes and deletions are its own (an overlay on /workspace)"
is "$(api GET '/v1/workspaces/b/files?path=t')" two "file calls see the same view"
api PUT /v1/workspaces/c '{"snapshot":"s1"}' >/dev/null
r=$(run_sh c 'cat t dep/lib/f; ls dep/lib')
is "$(stdout_of "$r")" "$(printf 'top\none\nf')" "a second workspace from the snapshot does not see the first one's writes"
is "$(cd "$SNAPS/s1/tree" && find . -printf '%p %s %m\n' | sort | md5sum)" "$before" "the snapshot itself never changed"
r=$(run_sh b 'umount /workspace 2>&1 || echo refused')
like "$(stdout_of "$r")" refused "a command cannot unmount the overlay"
r=$(api GET /v1/snapshots/s1)
is "$(field "$r" .workspaces)" 2 "the snapshot counts the workspaces standing on it"
r=$(api PUT /v1/workspaces/x '{"snapshot":"nope"}')
is "$(status) $(err_code "$r")" "404 snapshot_not_found" "an unknown snapshot is refused"
is "$(status) $(field "$(api GET /v1/workspaces/x)" .error.code)" "404 workspace_not_found" "and nothing was made"

# --- a snapshot of a workspace standing on one is flattened ---
r=$(api PUT /v1/snapshots/s2 '{"workspace":"b"}')
is "$(status)" 200 "a workspace on a snapshot can be captured"
api PUT /v1/workspaces/d '{"snapshot":"s2"}' >/dev/null
is "$(stdout_of "$(run_sh d 'cat t; ls dep/lib')")" "$(printf 'two\ng')" "its snapshot holds its own view (deletions included)"

# --- hibernate, wake, restarts ---
api DELETE /v1/workspaces/b '{"prefer":"hibernate"}' >/dev/null
api PUT /v1/workspaces/b >/dev/null
is "$(stdout_of "$(run_sh b 'cat t; ls dep/lib')")" "$(printf 'two\ng')" "hibernate and wake keep the view"
sd_stop KILL
sd_launch_as postgres
is "$(stdout_of "$(run_sh b 'cat t; cat dep/lib/g')")" "$(printf 'two\nnew')" "a daemon SIGKILLed and restarted re-adopts it"
kill -KILL "$(jq -r .holder_pid "$SD_STATE/workspaces/c/meta.json")"
sd_stop TERM
sd_launch_as postgres
is "$(stdout_of "$(run_sh c 'cat t dep/lib/f')")" "$(printf 'top\none')" \
   "a workspace whose holder died meanwhile gets a new one over the snapshot"

# --- delete ---
r=$(api DELETE /v1/snapshots/s1)
is "$(status) $(err_code "$r")" "409 snapshot_in_use" "a snapshot workspaces stand on is not deleted"
api DELETE /v1/workspaces/b '{"prefer":"hibernate"}' >/dev/null
r=$(api DELETE /v1/snapshots/s1)
is "$(status) $(err_code "$r")" "409 snapshot_in_use" "a hibernated workspace stands on it too"
api DELETE /v1/workspaces/b >/dev/null
api DELETE /v1/workspaces/c >/dev/null
is "$(ls -A "$SD_STATE/workspaces" | grep -c '^[bc]$')" 0 "releasing them removes their own layers"
r=$(api DELETE /v1/snapshots/s1)
is "$(status) $(field "$r" .deleted)" "200 true" "then it is deleted"
is "$(test -e "$SNAPS/s1" && echo there || echo gone)" gone "with its tree"
r=$(api DELETE /v1/snapshots/s1)
is "$(status) $(err_code "$r")" "404 snapshot_not_found" "deleting it again is 404"
is "$(field "$(api GET '/v1/snapshots?label=mesh.project=p1')" '.snapshots|length')" 0 "the list no longer shows it"

# --- a capture that does not fit, and one a killed daemon left ---
# (each workspace holds at most its disk quota, a quarter of the 48 MiB: others fill the rest,
# as many as the disk takes)
run_sh a 'head -c 30000000 /dev/zero > big' >/dev/null
for w in f1 f2 f3; do
  api PUT "/v1/workspaces/$w" >/dev/null
  [ "$(status)" = 200 ] && run_sh "$w" 'head -c 30000000 /dev/zero > big' >/dev/null
done
r=$(api PUT /v1/snapshots/s3 '{"workspace":"a"}')
is "$(status) $(err_code "$r")" "507 disk_full" "a capture that does not fit the disk is disk_full"
is "$(ls -A "$SNAPS" | tr '\n' ' ')" "s2 " "and leaves nothing half made"
is "$(field "$(api GET /v1/snapshots/s3)" .error.code)" snapshot_not_found "nor anything listed"
run_sh a 'rm big' >/dev/null
for w in f1 f2 f3; do api DELETE "/v1/workspaces/$w" >/dev/null; done
mkdir -p "$SNAPS/.capture-s4/tree" && chown -R postgres "$SNAPS/.capture-s4"
sd_stop TERM
sd_launch_as postgres
is "$(test -e "$SNAPS/.capture-s4" && echo there || echo gone)" gone "a capture a killed daemon left is removed at start"
like "$(cat "$SD_DIR/log")" "removing .*capture-s4 \(left by an interrupted capture" "and logged"
api DELETE /v1/workspaces/d >/dev/null
api DELETE /v1/snapshots/s2 >/dev/null
api DELETE /v1/workspaces/a '{"prefer":"hibernate"}' >/dev/null
r=$(api PUT /v1/snapshots/s5 '{"workspace":"a"}')
is "$(status) $(err_code "$r")" "409 workspace_not_running" "a hibernated workspace is not captured"

# --- method and route errors ---
r=$(api POST /v1/snapshots/s1 '{}')
is "$(status) $(err_code "$r")" "405 method_not_allowed" "snapshots take GET, PUT and DELETE"
r=$(api GET /v1/snapshots/s1/x)
is "$(status) $(err_code "$r")" "404 not_found" "no deeper snapshot routes"

# --- root daemon, sandboxes as nobody ---
sd_stop TERM
SD_SOCKET=
sd_start
is "$(field "$(api GET /v1/capabilities)" .capabilities.snapshot)" true "snapshot is declared by a root daemon"
new_ws r1
run_sh r1 'mkdir -m 700 priv && echo secret > priv/s && echo x > y' >/dev/null
api PUT /v1/snapshots/rs '{"workspace":"r1"}' >/dev/null
is "$(status) $(stat -c %U "$SD_STATE/workspaces/.snapshots/rs/tree/priv/s")" "200 nobody" \
   "its snapshot belongs to the sandbox user"
api PUT /v1/workspaces/r2 '{"snapshot":"rs"}' >/dev/null
is "$(stdout_of "$(run_sh r2 'cat priv/s; echo z > y; cat y')")" "$(printf 'secret\nz')" \
   "a workspace starts from it and writes over it"
is "$(cat "$SD_STATE/workspaces/.snapshots/rs/tree/y")" x "without changing it"
finish
