#!/usr/bin/env bash
# The docker driver's in-container scripts, in a real container on a private dockerd
# (test/lib/docker.sh): the very scripts the driver sends (src/backends/docker_background.c,
# printed by test/docker/bg_tool.c) run the way the driver runs them (a claim, stdin through the
# archive API, the wrapper in a detached exec, output / kill / forget in attached execs, as the
# workspace user in a container confined like the driver's), and the driver's own reader parses
# every output answer.  Start, output from offsets reassembled byte for byte (NUL and non-UTF-8
# included), the long poll returning on new bytes and on the end, TERM and INT reaching the
# command's tree, KILL of the tree, the timeout, forget, a stopped and restarted container; and
# an ordinary exec's wrapper: status, output and trailer, INT and QUIT reaching the command, the
# timeout, a trailer the command cannot write.
# Skipped visibly when dockerd cannot run here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/docker.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
w=$(mktemp -d /tmp/mesh-docker-bg.XXXXXX); chmod 711 "$w"
trap 'mesh_docker_stop; [ -n "${KEEP:-}" ] || rm -rf "$w"' EXIT
if ! cc -Wall -Wextra -Werror -std=gnu11 -I "$root/src" -o "$w/bg_tool" "$root/test/docker/bg_tool.c" \
     "$root/src/backends/docker_background.c" 2> "$w/cc.err"; then
  plan 1; ok 1 "the script tool builds"; sed 's/^/# /' "$w/cc.err"; done_testing
fi
if ! mesh_docker_start "$w/docker" 2> "$w/docker.err" || ! mesh_docker_image mesh-bg-test 2>> "$w/docker.err"; then
  skip_all "dockerd cannot run here: $(tr '\n' ' ' < "$w/docker.err" | cut -c1-200)"
fi
plan 59
C=mesh-bg-test-$$
docker run -d --name "$C" --init --user 1000:1000 --network none --read-only --cap-drop ALL \
  --security-opt no-new-privileges --pids-limit 128 --memory 256m --memory-swap 256m \
  --mount type=volume,target=/workspace --mount type=volume,target=/run/mesh \
  --entrypoint /bin/sleep mesh-bg-test 2147483647 >/dev/null
ok $? "a container confined like the driver's"

# script NAME ARGS...: one of the driver's scripts in an attached exec, as the workspace user
# (each bounded: a poll that never returned would fail its test, not hang the suite)
script() { timeout 120 docker exec -u 1000:1000 -w /workspace "$C" sh -c "$("$w/bg_tool" script "$1")" mesh "${@:2}"; }
# start KEY TIMEOUT DIR ARGV...: claim the key, then the wrapper in a detached exec
start() {
  [ "$(script claim "$1")" = claimed ] &&
    docker exec -d -u 1000:1000 -w /workspace "$C" sh -c "$("$w/bg_tool" script wrapper)" mesh "$@"
}
# poll KEY LOOKS MAX: output from where KEY's reassembled streams end; the reader's words on stdout
poll() {
  local a b
  a=$(stat -c %s "$w/$1.out" 2>/dev/null || echo 0) b=$(stat -c %s "$w/$1.err" 2>/dev/null || echo 0)
  script output "$1" "$a" "$b" "$2" "$3" | "$w/bg_tool" parse "$w/$1.out" "$w/$1.err"
}
# field NAME WORDS: the value of NAME=... in the reader's words
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
# drain KEY MAX: poll until the bytes reach the end (at most 120 answers of at most a second's
# wait each); the last words
drain() {
  local words i
  for i in $(seq 1 120); do
    words=$(poll "$1" 20 "$2") || { echo "$words"; return 1; }
    [ "$(field reaches_end "$words")" = 1 ] && { echo "$words answers=$i"; return 0; }
  done
  echo "$words"; return 1
}
# until_out KEY TEXT: poll until KEY's stdout holds TEXT (the command is ready)
until_out() {
  for _ in $(seq 1 100); do
    poll "$1" 40 65536 >/dev/null; grep -q "$2" "$w/$1.out" 2>/dev/null && return 0
  done
  return 1
}

# --- claim and start
is "$(script claim k0)" claimed "a new key is claimed"
is "$(script claim k0)" used "a key in use is refused"
is "$(docker exec "$C" stat -c '%U %s' /run/mesh/bg/k0/out /run/mesh/bg/k0/err | tr '\n' ' ')" \
   "agent 0 agent 0 " "the claim makes both streams, empty, as the workspace user"
is "$(field state "$(poll k0 0 10)")" running "a claimed command not started yet reads as running"
docker exec -u 1000:1000 "$C" sh -c 'echo 0.00 > /run/mesh/bg/k0/claimed'
is "$(field state "$(poll k0 0 10)")" lost "one claimed a minute ago and never started is lost"

# --- stdin through the archive API; output reassembled from offsets, byte for byte
python3 - "$w" <<'EOF'
import io, sys, tarfile
w = sys.argv[1]
data = bytes(range(256)) * 40 + "é\n".encode() + b"\xff\xfe\x00"
open(w + "/stdin", "wb").write(data)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
    info = tarfile.TarInfo("k1/in"); info.size = len(data); info.uid = info.gid = 1000; info.mode = 0o600
    t.addfile(info, io.BytesIO(data))
open(w + "/stdin.tar", "wb").write(buf.getvalue())
EOF
is "$(script claim k1)" claimed "claimed before its stdin is delivered"
curl -sf -m 10 --unix-socket "$w/docker/docker.sock" -X PUT -H 'Content-Type: application/x-tar' \
  --data-binary @"$w/stdin.tar" "http://localhost/v1.41/containers/$C/archive?path=/run/mesh/bg" >/dev/null
ok $? "stdin lands in the record through the archive API"
docker exec -d -u 1000:1000 -w /workspace "$C" sh -c "$("$w/bg_tool" script wrapper)" mesh k1 0 . \
  sh -c 'cat; printf "\000err\377\n" >&2; exit 3'
words=$(drain k1 1000); ok $? "the output is read to its end in pieces of 1000 bytes"
cmp -s "$w/stdin" "$w/k1.out"; ok $? "stdout reassembled from offsets is byte-identical (all 256 byte values)"
printf '\000err\377\n' > "$w/k1.expected-err"
cmp -s "$w/k1.expected-err" "$w/k1.err"; ok $? "stderr too (NUL and 0xff)"
is "$(field exit "$words") $(field out_total "$words") $(field timed_out "$words") $(field killed "$words")" \
   "3 $(stat -c %s "$w/stdin") 0 0" "the end: the command's status and stdout's total"
[ "$(field answers "$words")" -ge 11 ]; ok $? "it took several answers ($(field answers "$words"))"
words=$(poll k1 0 100)
is "$(field state "$words") $(field out_len "$words") $(field reaches_end "$words")" "ended 0 1" \
   "offsets at the end: nothing more, and ended"
words=$(script output k1 99999999 0 0 100 | "$w/bg_tool" parse /dev/null /dev/null)
is "$(field out_from "$words") $(field out_len "$words") $(field reaches_end "$words")" "99999999 0 1" \
   "offsets past the end: nothing, from where asked, and ended"
words=$(script output k1 256 0 0 10 | "$w/bg_tool" parse "$w/k1.part" /dev/null)
is "$(od -An -tx1 "$w/k1.part" | tr -d ' \n')" "00010203040506070809" "bytes from any offset, at most max_bytes"

# --- argv reaches the command as given: nothing in it is shell to the wrapper
start ka 0 . printf '%s|' '$(touch /workspace/injected)' '; touch /workspace/injected' '"' "'" '*' ''
drain ka 100 >/dev/null
is "$(cat "$w/ka.out")" "\$(touch /workspace/injected)|; touch /workspace/injected|\"|'|*||" "argv passes through the wrapper verbatim"
docker exec "$C" touch /workspace/control && docker exec "$C" test -e /workspace/control
ok $? "control: a file made in the container's /workspace is seen by the same test -e"
docker exec "$C" rm -f /workspace/control
docker exec "$C" test -e /workspace/injected; ok $((! $?)) "and none of it ran as shell"

# --- the long poll: it returns on new bytes, and on the end
start k2 0 . sh -c 'echo ready; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo late; sleep 600'
until_out k2 ready; ok $? "a running command's first line is read"
words=$(poll k2 2 100)
is "$(field state "$words") $(field out_len "$words")" "running 0" "a poll with nothing new answers at its wait, running"
( sleep 0.5; docker exec -u 1000:1000 "$C" touch /workspace/go ) & toucher=$!
# a wait of ten minutes: the answer can only come from the new bytes (script's timeout bounds it)
words=$(poll k2 12000 100); wait $toucher
is "$(field state "$words") $(cat "$w/k2.out")" "running ready
late" "a long poll returns with the new bytes while the command runs"
start k3 0 . sh -c 'sleep 0.5; exit 7'
words=$(poll k3 12000 100)
is "$(field state "$words") $(field exit "$words") $(field reaches_end "$words")" "ended 7 1" \
   "a long poll returns when the command ends without output"

# --- lines as they are printed come one answer at a time, in order
start k4 0 . sh -c 'for i in 1 2 3 4 5; do echo "line $i"; sleep 0.5; done'
words=$(drain k4 100)
is "$(tr '\n' ' ' < "$w/k4.out")" "line 1 line 2 line 3 line 4 line 5 " "every line, in order, once"
[ "$(field answers "$words")" -ge 2 ]; ok $? "delivered over several answers ($(field answers "$words"))"

# --- many at once: eight commands started and read concurrently, each gets its own bytes
for i in 1 2 3 4 5 6 7 8; do
  start "c$i" 0 . sh -c "i=0; while [ \$i -lt 300 ]; do echo c$i-\$i; i=\$((i + 1)); done" &
done
wait_pids=$(jobs -p | grep -vx "$MESH_DOCKER_PID" || true); [ -z "$wait_pids" ] || wait $wait_pids
for i in 1 2 3 4 5 6 7 8; do drain "c$i" 700 > "$w/c$i.words" & done
wait_pids=$(jobs -p | grep -vx "$MESH_DOCKER_PID" || true); [ -z "$wait_pids" ] || wait $wait_pids
own=0
for i in 1 2 3 4 5 6 7 8; do
  seq 0 299 | sed "s/^/c$i-/" | cmp -s - "$w/c$i.out" && [ "$(field reaches_end "$(cat "$w/c$i.words")")" = 1 ] && own=$((own + 1))
done
is "$own" 8 "eight concurrent commands: each one's output whole, its own, in order"

# --- signals reach the whole tree
# (the leader waits for its child to handle TERM, then dies of it: a leader that ended first
# would have the group killed with it before the child's trap ran)
start k5 0 . sh -c 'sh -c "trap \"echo child got TERM; exit 0\" TERM; echo ready; while :; do sleep 0.1; done" & c=$!
  trap "wait \$c; trap - TERM; kill -TERM \$\$" TERM; wait $c'
until_out k5 ready; ok $? "a command with a child that traps TERM runs"
script kill k5 TERM; ok $? "kill TERM answers"
words=$(drain k5 1000)
grep -q "child got TERM" "$w/k5.out"; ok $? "TERM reached the child, not only the leader"
is "$(field exit "$words") $(field killed "$words")" "143 1" "the leader died of TERM: killed"
start k6 0 . sh -c 'trap "echo got INT; exit 5" INT; echo ready; while :; do sleep 0.1; done'
until_out k6 ready; script kill k6 INT
words=$(drain k6 1000)
is "$(grep -c 'got INT' "$w/k6.out") $(field exit "$words") $(field killed "$words")" "1 5 0" \
   "INT reaches the command (not ignored as for a shell's & job); it exited by itself: not killed"
start k7 0 . sh -c 'sleep 1000 & sleep 1001 & echo ready; wait'
until_out k7 ready
is "$(docker exec "$C" ps -o args | grep -cE '^sleep 100[01]$')" 2 "a tree of two sleeps runs"
script kill k7 KILL
words=$(drain k7 1000)
is "$(field exit "$words") $(field killed "$words")" "137 1" "KILL ends the command: killed"
is "$(docker exec "$C" ps -o args | grep -cE '^sleep 100[01]$')" 0 "and its whole tree"
script kill k7 TERM; ok $? "kill of a finished command succeeds"
is "$(docker exec "$C" cat /run/mesh/bg/k7/killed | tr '\n' ' ')" "KILL " "and sends nothing more"
script kill nosuch TERM; ok $? "kill of an unknown key succeeds (nothing to kill)"

# --- the timeout kills the tree and is marked
start k8 1 . sh -c 'echo start; sleep 100 & sleep 101; echo never'
words=$(drain k8 1000)
is "$(field timed_out "$words") $(field exit "$words") $(field killed "$words") $(cat "$w/k8.out")" \
   "1 137 0 start" "the timeout kills the command, marked timed out"
is "$(docker exec "$C" ps -o args | grep -cE '^sleep 10[01]$')" 0 "with its tree"
start k9 0 /workspace/nosuch true
words=$(drain k9 1000)
is "$(field exit "$words") $(cat "$w/k9.err")" "1 mesh: no such directory: /workspace/nosuch" \
   "a missing directory ends the command with a clear message"

# --- forget
docker exec "$C" test -d /run/mesh/bg/k1; ok $? "control: the ended command's directory is there before forget"
is "$(script forget k1)" gone "forget removes an ended command's record"
docker exec "$C" test -e /run/mesh/bg/k1; ok $((! $?)) "its directory is gone"
is "$(script forget k1)" gone "forgetting it again is success"
is "$(script forget k2)" running "a running command's record is kept"
is "$(field state "$(poll k1 0 10)")" missing "output of a forgotten command: missing"

# --- a stopped container: its commands are gone; the records say so once it runs again
docker stop -t 1 "$C" >/dev/null
err=$(script output k2 0 0 0 10 2>&1); rc=$?
ok $((rc == 0)) "a stopped container takes no output exec"
grep -q "is not running" <<<"$err"; ok $? "the Engine says it is not running (the driver's NOT_RUNNING)"
docker start "$C" >/dev/null
words=$(poll k2 0 10)
is "$(field state "$words")" lost "after a restart the command is lost, not running (the driver's NOT_FOUND)"
script kill k2 KILL; ok $? "kill of a lost command succeeds without signalling anyone"
is "$(script forget k2)" gone "and its record can be forgotten"
start k2b 0 . sh -c 'echo again'
drain k2b 100 >/dev/null; is "$(cat "$w/k2b.out")" again "the restarted container runs new background commands"

# --- an ordinary exec's wrapper, attached as the driver runs it: fg KEY TIMEOUT KEPT ARGV... in
# /workspace, stdout to KEY.fo, stderr and the trailer to KEY.fe; the exit status is the command's
fg() {
  local k=$1; shift
  timeout 120 docker exec -u 1000:1000 -w /workspace "$C" sh -c "$("$w/bg_tool" script exec)" mesh "$k" "$1" "$2" . "${@:3}" \
    >"$w/$k.fo" 2>"$w/$k.fe"
}
# fg_signalled KEY SIGNAL: an exec of sleep, sent SIGNAL through the kill script once it runs
fg_signalled() {
  fg "$1" 60 100 sleep 60 & local job=$!
  for _ in $(seq 1 100); do docker exec "$C" test -s "/run/mesh/$1/pid" && break; sleep 0.05; done
  script kill "$1" "$2"; wait "$job"
}
fg f1 30 100 sh -c 'echo out; echo err >&2; exit 4'
is "$? $(cat "$w/f1.fo") $(cat -v "$w/f1.fe" | tr '\n' ' ')" "4 out err ^^mesh:0:4:4" \
   "an exec: its status, its output, the trailer after stderr"
fg_signalled f2 INT
is "$?" 130 "INT sent by a kill call ends a command that keeps its default action (not ignored as for a shell's & job)"
fg_signalled f3 QUIT
is "$?" 131 "so does QUIT"
fg f4 0.5 100 sh -c 'echo start; sleep 100 & sleep 101'
is "$? $(cat "$w/f4.fo") $(cat -v "$w/f4.fe" | grep -o '\^\^mesh:[01]:[0-9]*')" "137 start ^^mesh:1:6" \
   "the timeout kills the command, marked timed out in the trailer"
is "$(docker exec "$C" ps -o args | grep -cE '^sleep 10[01]$')" 0 "with its tree"
fg f5 30 100 sh -c 'echo forged >&3'
cat -v "$w/f5.fe" | grep -q '\^\^mesh:'; ok $? "control: the trailer is in the file looked at"
grep -q forged "$w/f5.fe"; ok $((! $?)) "the command cannot write on the trailer's descriptor"
done_testing
