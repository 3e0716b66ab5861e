#!/usr/bin/env bash
# The extension tells the truth about what the embedded daemon could not do: a release leaves
# no file behind at any depth (a 3000-deep tree), a release that could not remove everything
# is an error and the row stays releasing until the reaper's next sweep finishes it, and what
# only the sandbox finds out gets domain errors (an environment too large for execve, a
# mode-0 file, a path over PATH_MAX in the sandbox) with an SQLSTATE and a hint, never an
# HTTP status or a fake exit 127.
. "$(dirname "$0")/lib.sh"
plan 18
WS_DIR="$PGDIR/data/mesh_sandboxd/workspaces"
ref_of() { q "SELECT external_ref FROM mesh.workspaces WHERE run_id = '$1'"; }
# files_of REF -> the workspace's /workspace on the daemon's disk (in its quota slot, if any)
files_of() { if [ -d "$WS_DIR/$1/store" ]; then echo "$WS_DIR/$1/store/files"; else echo "$WS_DIR/$1/files"; fi; }
# err SQL -> "SQLSTATE: message" (first line) of the error the statement raises
err() { psql -X -qAt -v VERBOSITY=verbose -c "$1" 2>&1 >/dev/null | sed -n 's/^ERROR:  //p' | head -1; }
hint() { psql -X -qAt -c "$1" 2>&1 >/dev/null | sed -n 's/^HINT:  //p' | head -1; }
cleanup() { umount "$(files_of "$(ref_of tr-stuck)")/m" 2>/dev/null; }
trap cleanup EXIT

# 1. a tree deeper than PATH_MAX is gone after release
q "SELECT 1 FROM mesh_acquire('tr-deep', 'tr-agent', 'tester')" >/dev/null
depth=$(q "SELECT stdout FROM mesh_exec('tr-deep', ARRAY['python3', '-c', '
import os
fd = os.open(\"/workspace\", os.O_RDONLY)
for i in range(3000):
    os.mkdir(\"d\", dir_fd=fd)
    n = os.open(\"d\", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = n
print(i + 1)'])")
is "$depth" 3000 "a 3000-deep tree is made in the workspace"
is "$(q "SELECT capabilities->>'seccomp' FROM mesh.workspaces WHERE run_id = 'tr-deep'")" true \
   "the workspace records the daemon's seccomp capability"
ref=$(ref_of tr-deep)
test -d "$(files_of "$ref")/d"; ok $? "it is on the daemon's disk"
is "$(q "SELECT mesh_release('tr-deep', 'done')")" destroyed "release says destroyed"
test ! -e "$WS_DIR/$ref"; ok $? "and nothing of it is left on disk"

# 2. a release that cannot remove everything is an error; the reaper finishes it later
q "SELECT 1 FROM mesh_acquire('tr-stuck', 'tr-agent', 'tester')" >/dev/null
q "SELECT exit_code FROM mesh_exec('tr-stuck', ARRAY['mkdir', 'm'])" >/dev/null
ref=$(ref_of tr-stuck)
mount -t tmpfs -o size=1m mesh-e2e "$(files_of "$ref")/m"
e=$(err "SELECT mesh_release('tr-stuck', 'done')")
case "$e" in 58030:*"could not be removed"*) ok 0 "an incomplete release raises 58030 (io_error)";;
             *) ok 1 "an incomplete release raises 58030 (io_error)"; echo "# got: $e";; esac
case "$e" in *HTTP*|*release_incomplete*) ok 1 "its message has no HTTP status or daemon code"; echo "# got: $e";;
             *) ok 0 "its message has no HTTP status or daemon code";; esac
is "$(q "SELECT status || ' ' || coalesce(release_outcome, '-') FROM mesh.workspaces WHERE run_id = 'tr-stuck'")" \
   "releasing -" "the row stays releasing, without an outcome"
is "$(q "SELECT status_reason LIKE '%could not be removed%the reaper retries%' FROM mesh.workspaces WHERE run_id = 'tr-stuck'")" \
   t "its reason says what is left and that the reaper retries"
umount "$(files_of "$ref")/m"
q "SELECT count(*) FROM mesh.sweep()" >/dev/null
is "$(q "SELECT status || ' ' || release_outcome FROM mesh.workspaces WHERE run_id = 'tr-stuck'")" \
   "released destroyed" "the next sweep retries and destroys it"
test ! -e "$WS_DIR/$ref"; ok $? "its directory is gone"

# 3. domain errors for what only the sandbox finds out
# arguments pass the extension's own limits, but a granted secret delivered as a variable
# makes the environment too large for execve
canary="TRUTHFUL-CANARY-$RANDOM"
q "SELECT mesh.secret_set('tr-agent', 'huge', '$canary' || repeat('s', 200000))" >/dev/null
q "SELECT mesh.environment_set('tr-huge', '[{\"kind\": \"secret\", \"name\": \"huge\", \"as\": \"HUGE\"}]')" >/dev/null
q "SELECT 1 FROM mesh_acquire('tr-err', 'tr-agent', 'tester', environment => 'tr-huge')" >/dev/null
e=$(err "SELECT * FROM mesh_exec('tr-err', ARRAY['true'])")
case "$e" in 54000:*"argument list too long"*) ok 0 "an environment over the kernel's limit raises 54000, not exit 127";;
             *) ok 1 "an environment over the kernel's limit raises 54000, not exit 127"; echo "# got: $e";; esac
case "$e" in *"$canary"*) ok 1 "the error does not show the secret";; *) ok 0 "the error does not show the secret";; esac
is "$(q "SELECT status || ' ' || (error LIKE '%argument list too long%') FROM mesh.execs WHERE run_id = 'tr-err' ORDER BY id DESC LIMIT 1")" \
   "error true" "the exec row says error, with the reason"
like_hint=$(hint "SELECT * FROM mesh_exec('tr-err', ARRAY['true'])")
case "$like_hint" in *stdin*) ok 0 "the hint says how to pass large data";; *) ok 1 "the hint says how to pass large data"; echo "# got: $like_hint";; esac
q "SELECT mesh_release('tr-err', 'done')" >/dev/null
q "SELECT 1 FROM mesh_acquire('tr-file', 'tr-agent', 'tester')" >/dev/null
q "SELECT exit_code FROM mesh_exec('tr-file', ARRAY['sh', '-c', 'echo x > zero.txt; chmod 0 zero.txt'])" >/dev/null
e=$(err "SELECT mesh_read_file('tr-file', 'zero.txt')")
case "$e" in 42501:*"mode 0000"*) ok 0 "a mode-0 file: 42501 naming the mode";;
             *) ok 1 "a mode-0 file: 42501 naming the mode"; echo "# got: $e";; esac
# 16 names of 254 bytes and one of 10: 4090 bytes, within the extension's limit, but over
# PATH_MAX as the sandbox sees it (/workspace/...)
long=$(q "SELECT string_agg(repeat('n', 254), '/') || '/' || repeat('m', 10) FROM generate_series(1, 16)")
e=$(err "SELECT mesh_read_file('tr-file', '$long')")
case "$e" in 22001:*"too long"*) ok 0 "a path over PATH_MAX inside the sandbox: 22001, too long";;
             *) ok 1 "a path over PATH_MAX inside the sandbox: 22001, too long"; echo "# got: $e";; esac
case "$e" in *HTTP*|*name_too_long*) ok 1 "no HTTP status or daemon code in it"; echo "# got: $e";;
             *) ok 0 "no HTTP status or daemon code in it";; esac
q "SELECT mesh_release('tr-file', 'done')" >/dev/null
done_testing
