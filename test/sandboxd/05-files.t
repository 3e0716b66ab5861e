#!/bin/bash
# Files: binary round trip, mode, parents, atomic replace, confinement (.., absolute paths,
# symlinks out), directories, missing files, size limits, ownership, hibernated workspaces.
. "$(dirname "$0")/lib.sh"
plan 28
sd_start --max-file-bytes 100000
new_ws f1

head -c 65536 /dev/urandom > "$SD_DIR/blob"
printf '\0\377\n\r' >> "$SD_DIR/blob"
r=$(api PUT "/v1/workspaces/f1/files?path=bin/blob.dat&mode=384" "@$SD_DIR/blob")
is "$(status) $(field "$r" .path) $(field "$r" .bytes)" "200 /workspace/bin/blob.dat 65540" "binary write creates parents"
curl -s -m 10 -D "$SD_DIR/headers" -H "Authorization: Bearer $SD_TOKEN" -o "$SD_DIR/blob.back" \
    "$SD_URL/v1/workspaces/f1/files?path=/workspace/bin/blob.dat"
cmp -s "$SD_DIR/blob" "$SD_DIR/blob.back"; ok $? "binary round trip is byte exact"
like "$(grep -i x-mesh-file-mode "$SD_DIR/headers")" "0600" "mode 384 (0600) is applied and reported"
like "$(grep -i content-type "$SD_DIR/headers")" "application/octet-stream" "raw octet-stream body"
r=$(run_sh f1 'stat -c "%a %U" bin/blob.dat; md5sum < bin/blob.dat')
is "$(stdout_of "$r")" "600 nobody
$(md5sum < "$SD_DIR/blob")" "the sandbox sees the same bytes, owned by the sandbox user"
is "$(stat -c %U "$SD_STATE/workspaces/f1/files/bin")" nobody "created parent directories belong to the sandbox user"
api PUT "/v1/workspaces/f1/files?path=note.txt" "first" >/dev/null
api PUT "/v1/workspaces/f1/files?path=note.txt" "second" >/dev/null
is "$(api GET "/v1/workspaces/f1/files?path=note.txt")" second "write replaces the file"
is "$(ls -a "$SD_STATE/workspaces/f1/files" | grep -c mesh-write)" 0 "no temporary file is left behind"
api PUT "/v1/workspaces/f1/files?path=empty" "" >/dev/null
is "$(status) $(stat -c %s "$SD_STATE/workspaces/f1/files/empty")" "200 0" "empty body writes an empty file"

r=$(api GET "/v1/workspaces/f1/files?path=../../../../etc/passwd"); is "$(status) $(err_code "$r")" "400 path_refused" "'..' above /workspace is refused"
r=$(api GET "/v1/workspaces/f1/files?path=/etc/passwd"); is "$(status) $(err_code "$r")" "400 path_refused" "absolute path outside /workspace is refused"
r=$(api PUT "/v1/workspaces/f1/files?path=a/../../escape" "x"); is "$(status) $(err_code "$r")" "400 path_refused" "write with .. escaping is refused"
test ! -e "$SD_STATE/workspaces/f1/escape"; ok $? "nothing was written outside"
run_sh f1 'ln -s /etc/passwd abs-link; ln -s ../../../../../../etc rel-link; mkdir -p d; ln -s ../note.txt d/inside-link' >/dev/null
r=$(api GET "/v1/workspaces/f1/files?path=abs-link"); is "$(status) $(err_code "$r")" "400 path_refused" "absolute symlink out is refused"
r=$(api GET "/v1/workspaces/f1/files?path=rel-link/passwd"); is "$(status) $(err_code "$r")" "400 path_refused" "relative symlink climbing out is refused"
r=$(api PUT "/v1/workspaces/f1/files?path=rel-link/mesh-escape" "x"); is "$(status) $(err_code "$r")" "400 path_refused" "writing through a symlink out is refused"
test ! -e /etc/mesh-escape; ok $? "the host /etc is untouched"
r=$(api GET "/v1/workspaces/f1/files?path=d/inside-link"); is "$r" second "a symlink staying inside is followed"
run_sh f1 'ln -s /workspace/note.txt abs-inside; ln -s /workspace/d abs-dir; ln -s /tmp tmp-link' >/dev/null
r=$(api GET "/v1/workspaces/f1/files?path=abs-inside"); is "$r" second "an absolute symlink into /workspace is followed as inside"
api PUT "/v1/workspaces/f1/files?path=abs-dir/via-link" "v" >/dev/null
is "$(status) $(cat "$SD_STATE/workspaces/f1/files/d/via-link")" "200 v" "writing through an absolute symlink to a /workspace dir"
r=$(api PUT "/v1/workspaces/f1/files?path=tmp-link/x" "x"); is "$(status) $(err_code "$r")" "400 path_refused" "a symlink to /tmp (another mount) is refused"
r=$(api GET "/v1/workspaces/f1/files?path=/workspace/../etc/passwd"); is "$(status) $(err_code "$r")" "400 path_refused" "/workspace/.. climbing out is refused"

r=$(api GET "/v1/workspaces/f1/files?path=bin"); is "$(status) $(err_code "$r")" "400 is_a_directory" "reading a directory"
r=$(api PUT "/v1/workspaces/f1/files?path=bin" "x"); is "$(status) $(err_code "$r")" "400 is_a_directory" "writing over a directory"
r=$(api GET "/v1/workspaces/f1/files?path=missing"); is "$(status) $(err_code "$r")" "404 file_not_found" "missing file"
head -c 100001 /dev/zero > "$SD_DIR/big"
r=$(api PUT "/v1/workspaces/f1/files?path=big" "@$SD_DIR/big"); is "$(status) $(err_code "$r")" "413 file_too_large" "write over --max-file-bytes"
run_sh f1 'head -c 100001 /dev/zero > big-inside' >/dev/null
r=$(api GET "/v1/workspaces/f1/files?path=big-inside"); is "$(status) $(err_code "$r")" "413 file_too_large" "read over --max-file-bytes"
api DELETE /v1/workspaces/f1 '{"prefer":"hibernate"}' >/dev/null
r=$(api GET "/v1/workspaces/f1/files?path=note.txt"); is "$(status) $(err_code "$r")" "409 workspace_not_running" "file call on a hibernated workspace"
finish
