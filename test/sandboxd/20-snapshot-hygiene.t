#!/bin/bash
# What a snapshot must never carry, and what it must not cost, on the embedded default (the
# daemon as postgres on a small workspaces filesystem of its own): the run token's
# /workspace/.mesh and the file call's temporary files are left out of a capture and so of every
# workspace started from it; /workspace/.meshignore leaves out what the project names, and a
# hostile one (a symlink to a host secret, a FIFO, 10 MB, a directory, '!' and '..' patterns)
# refuses the capture or names nothing, never reads outside /workspace nor blocks; a 1 GiB
# sparse file is captured and restored as its data, on a 48 MiB filesystem.
. "$(dirname "$0")/lib.sh"
id postgres >/dev/null 2>&1 || skip_all "no postgres user"
plan 30
sd_start_setup_as postgres $((48 << 20))
SNAPS="$SD_STATE/workspaces/.snapshots"
# tree_list SNAPSHOT -> the snapshot's entries, one a line, names with a newline shown as \n
tree_list() { (cd "$SNAPS/$1/tree" && find . -mindepth 1 -printf '%P\0' | sed -z 's/\n/\\n/g' | tr '\0' '\n' | LC_ALL=C sort); }

# --- the run token and the file call's writes in flight ---
new_ws a
api PUT "/v1/workspaces/a/files?path=.mesh/run-token&mode=384" "token-of-run-a" >/dev/null
is "$(status)" 200 "the run token is delivered as the extension does (the file call, mode 0600)"
r=$(run_sh a 'echo other > .mesh/other && mkdir -p src/.mesh && echo kept > src/.mesh/cfg &&
              echo half > src/.mesh-write-7f-1 && echo partial > .mesh-write-1-2 && echo code > src/main.c')
is "$(field "$r" .exit_code)" 0 "the workspace's files are written"
r=$(api PUT /v1/snapshots/t1 '{"workspace":"a"}')
is "$(status)" 200 "it is captured"
is "$(tree_list t1 | tr '\n' ' ')" "src src/.mesh src/.mesh/cfg src/main.c " \
   "the snapshot holds neither /workspace/.mesh nor a temporary file of the file call (a .mesh below the top is the project's)"
is "$(field "$r" .files)" 2 "its count is of what it holds"
api PUT /v1/workspaces/b '{"snapshot":"t1"}' >/dev/null
r=$(run_sh b 'ls -A; test -e .mesh/run-token && echo token-there; cat src/main.c')
is "$(stdout_of "$r")" "$(printf 'src\ncode')" "a workspace started from it has no run token, no .mesh, no temporary file"
api PUT "/v1/workspaces/b/files?path=.mesh/run-token&mode=384" "token-of-run-b" >/dev/null
is "$(api GET '/v1/workspaces/b/files?path=.mesh/run-token')" token-of-run-b "it gets its own token, as any new run"

# --- .meshignore ---
r=$(run_sh a 'mkdir -p secrets/deep config x/y build a/b/c notdir sub &&
  echo s > secrets/k && echo s > secrets/deep/k && echo k > config/id.key && echo k > x/y/id.key &&
  echo b > build/out && echo f > notdir/build && echo t > top.env && echo t > sub/top.env &&
  echo z > a/z && echo z > a/b/c/z && echo z > a/zz && echo n > "$(printf "nl\nname.key")" &&
  echo n > "$(printf "nl\nkeep")" && echo h > "#lit" && echo q > "wild?" &&
  printf "%s\n" "# the project'"'"'s own list" "" "secrets/" "*.key   " "/top.env" "build/" "a/**/z" \
      "\\#lit" "wild\\?" "../etc" "/../../etc/passwd" "/etc/hostname" "*/../../*" > .meshignore')
is "$(field "$r" .exit_code)" 0 "a .meshignore and the files it names are written"
r=$(api PUT /v1/snapshots/t2 '{"workspace":"a"}')
is "$(status)" 200 "the workspace is captured"
listed=$(tree_list t2 | tr '\n' ' ')
is "$listed" '.meshignore a a/b a/b/c a/zz config nl\nkeep notdir notdir/build src src/.mesh src/.mesh/cfg src/main.c sub sub/top.env x x/y ' \
   "dir/ (directories only), globs at any depth, anchored /name, a/**/z, \\-escapes and names with a newline are left out as the list says"

# --- a hostile .meshignore refuses the capture or names nothing; it never reads outside ---
capture_with() {  # capture_with ID SCRIPT: captures a as ID after SCRIPT ran in it; the answer
    run_sh a "rm -rf .meshignore; $2" >/dev/null   # in $r, "STATUS CODE" in $got
    r=$(api PUT "/v1/snapshots/$1" '{"workspace":"a"}')
    got="$(status) $(err_code "$r")"
}
capture_with h1 'ln -s /etc/shadow .meshignore'
is "$got" "422 meshignore_invalid" \
   "a .meshignore that is a symlink (to /etc/shadow) refuses the capture"
unlike_root=$(echo "$r" | grep -c 'root:')
is "$unlike_root" 0 "and the answer holds nothing of what it points to"
like "$(field "$r" .error.message)" "symlink" "the message says why"
started=$(date +%s)
capture_with h2 'mkfifo .meshignore'
is "$got" "422 meshignore_invalid" "a FIFO refuses it"
ok $(( $(date +%s) - started < 30 ? 0 : 1 )) "without waiting for a writer"
capture_with h3 'head -c 10000000 /dev/zero | tr "\0" "x" > .meshignore'
is "$got" "422 meshignore_invalid" \
   "a 10 MB .meshignore refuses it"
like "$(field "$r" .error.message)" "larger than 65536 bytes" "the message names the bound"
capture_with h4 'mkdir .meshignore'
is "$got" "422 meshignore_invalid" "a directory refuses it"
capture_with h5 'printf "secrets/\n!secrets/k\n" > .meshignore'
is "$got" "422 meshignore_invalid" \
   "a '!' pattern (re-including) is refused, not half obeyed"
like "$(field "$r" .error.message)" "line 2" "the message names the line"
capture_with h6 'seq 1 513 | sed "s/^/f/" > .meshignore'
is "$got" "422 meshignore_invalid" \
   "more than 512 patterns refuse it"
is "$(ls -A "$SNAPS" | grep -c -E '^(h[1-6]|\.capture-)')" 0 "refused captures leave nothing behind"
capture_with h7 'printf "../*\n/../../etc/shadow\n/proc/1/root/*\n**/../**\n" > .meshignore; rm -rf secrets config x build a notdir sub top.env nl* "#lit" wild*'
is "$got" "200 " \
   "patterns naming paths outside /workspace are taken"
is "$(tree_list h7 | tr '\n' ' ')" ".meshignore src src/.mesh src/.mesh/cfg src/main.c " \
   "and add nothing to it: a pattern can only leave out"
api DELETE /v1/snapshots/h7 >/dev/null
run_sh a 'rm -f .meshignore' >/dev/null

# --- sparse files stay sparse ---
r=$(run_sh a 'truncate -s 1G sparse && printf middle | dd of=sparse bs=1 seek=536870912 conv=notrunc 2>/dev/null &&
              printf end | dd of=sparse bs=1 seek=1073741821 conv=notrunc 2>/dev/null && du -k sparse | cut -f1')
ok $(( $(stdout_of "$r") < 1024 ? 0 : 1 )) "a 1 GiB sparse file with two data blocks is made in the workspace"
r=$(api PUT /v1/snapshots/sp '{"workspace":"a"}')
is "$(status)" 200 "it is captured on a 48 MiB filesystem"
f="$SNAPS/sp/tree/sparse"
is "$(stat -c %s "$f") $(dd if="$f" bs=1 skip=536870912 count=6 2>/dev/null) $(tail -c 3 "$f")" \
   "1073741824 middle end" "its size and data are kept"
ok $(( $(du -k "$f" | cut -f1) < 1024 ? 0 : 1 )) "and its holes: it takes $(du -k "$f" | cut -f1) KiB on disk"
api PUT /v1/workspaces/c '{"snapshot":"sp"}' >/dev/null
r=$(run_sh c 'stat -c %s sparse; du -k sparse | cut -f1; echo more >> sparse; tail -c 5 sparse')
out=$(stdout_of "$r")
is "$(echo "$out" | sed -n '1p;3p' | tr '\n' ' ')" "1073741824 more " \
   "a workspace started from it sees the whole file and can write to it (a copy-up)"
# overlayfs copies up in 1 MiB pieces, skipping holes: the data blocks' pieces, not 1 GiB
# the workspace's files: in its quota slot (<id>/store/files) on a host set up with disk quotas
ws_sparse="$SD_STATE/workspaces/c/files/sparse"
[ -d "$SD_STATE/workspaces/c/store" ] && ws_sparse="$SD_STATE/workspaces/c/store/files/sparse"
ws_kib=$(du -k "$ws_sparse" | cut -f1)
ok $(( $(echo "$out" | sed -n 2p) < 1024 && ${ws_kib:-999999} < 8192 ? 0 : 1 )) \
   "sparse in the workspace too, after the copy-up: ${ws_kib:-no file at $ws_sparse} KiB"
finish
