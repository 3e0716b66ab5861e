#!/usr/bin/env bash
# Every limit is the one enforced and the one the docs state:
#  1. each mesh.* setting the server knows is in README's settings table, with its built-in
#     default as PostgreSQL shows it, and the table names no setting the server does not know;
#  2. each input limit of docs/security.md's table is refused one byte past it with the
#     number the docs give in the message, and is not refused at the limit itself.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

# README: "| `mesh.x` | default | ..." rows
readme_defaults=$(grep -E '^\| `mesh\.[a-z_]+` \|' "$ROOT/README.md" | awk -F'|' '{gsub(/[ `]/, "", $2); gsub(/^ +| +$/, "", $3); gsub(/`/, "", $3); print $2 "=" $3}' | sort)
# the server: each setting's built-in value, shown the way SHOW would show it
server_defaults=$(q "SELECT name || '=' || CASE
    WHEN vartype = 'bool' THEN boot_val
    WHEN unit IS NULL OR boot_val::bigint <= 0 THEN coalesce(nullif(boot_val, ''), '(empty)')
    ELSE (WITH u(k, f, o) AS (VALUES ('B', 1, 0), ('kB', 1024, 1), ('MB', 1048576, 2), ('GB', 1073741824, 3),
                                      ('ms', 1, 0), ('s', 1000, 1), ('min', 60000, 2), ('h', 3600000, 3), ('d', 86400000, 4)),
               base(v) AS (SELECT boot_val::bigint * CASE unit WHEN 'B' THEN 1 WHEN 'kB' THEN 1024 WHEN 'MB' THEN 1048576
                                                              WHEN 'ms' THEN 1 WHEN 's' THEN 1000 WHEN 'min' THEN 60000 END)
          SELECT (base.v / u.f) || u.k FROM base, u
           WHERE base.v % u.f = 0 AND ((unit IN ('B', 'kB', 'MB') AND u.k IN ('B', 'kB', 'MB', 'GB'))
                                      OR (unit IN ('ms', 's', 'min') AND u.k IN ('ms', 's', 'min', 'h', 'd')))
           ORDER BY u.f DESC LIMIT 1) END
  FROM pg_settings WHERE name LIKE 'mesh.%' ORDER BY 1")

n_settings=$(echo "$server_defaults" | wc -l)
plan $((n_settings + 2 + 12))

while IFS= read -r line; do
  name=${line%%=*}
  is "$(echo "$readme_defaults" | grep -E "^$name=" | cut -d= -f2-)" "${line#*=}" \
     "README states $name's default as the server has it"
done <<< "$server_defaults"
extra=$(comm -23 <(echo "$readme_defaults" | cut -d= -f1) <(echo "$server_defaults" | cut -d= -f1))
is "$extra" "" "README's settings table names no setting the server does not have"
[ "$n_settings" -ge 15 ]
ok $? "the comparison covers the server's $n_settings mesh.* settings"

# docs/security.md's input limits: the documented number, refused one past it, kept at it
doc_limit() { grep -F "$1" "$ROOT/docs/security.md" | grep -oE '[0-9]+ bytes' | head -"${2:-1}" | tail -1 | cut -d' ' -f1; }
id_limit=$(doc_limit '| `run_id`, `agent_id`')
path_limit=$(doc_limit '| `path`, `dir`')
name_limit=$(doc_limit '| `path`, `dir`' 2)
arg_limit=$(doc_limit '| one `argv` element')
sqlerr() { psql -X -qAt -v VERBOSITY=verbose -c "$1" 2>&1 | grep -m1 -E '^ERROR' ; }
long() { python3 -c "import sys; print('a' * int(sys.argv[1]))" "$1"; }
name_path() { python3 -c "import sys; n=int(sys.argv[1]); print('/'.join(['d' * 200] * (n // 201)) + '/' + 'f' * (n - (n // 201) * 201))" "$1"; }

err=$(sqlerr "SELECT mesh_acquire('$(long $((id_limit + 1)))', 'a', 'b')")
[[ "$err" == *22001* && "$err" == *"the limit is $id_limit"* ]]
ok $? "a run_id one byte past the documented $id_limit is refused naming $id_limit: ${err:0:90}"
err=$(sqlerr "SELECT mesh_read_file('lim-none-$RANDOM', '$(long "$id_limit")')")
[[ "$err" != *"the limit is"* && "$err" == *"no workspace declared"* ]]
ok $? "an identifier of exactly $id_limit bytes passes the check (then: ${err:0:60})"
err=$(sqlerr "SELECT mesh_read_file('lim-none', '$(name_path $((path_limit + 1)))')")
[[ "$err" == *22001* && "$err" == *"the limit is $path_limit"* ]]
ok $? "a path one byte past the documented $path_limit is refused naming $path_limit: ${err:0:90}"
err=$(sqlerr "SELECT mesh_read_file('lim-none', '$(name_path "$path_limit")')")
[[ "$err" != *"the limit is"* && "$err" == *"no workspace declared"* ]]
ok $? "a path of exactly $path_limit bytes passes the check"
err=$(psql -X -qAt -c "SELECT mesh_read_file('lim-none', 'x/$(long $((name_limit + 1)))')" 2>&1)
[[ "$err" == *"at most $name_limit bytes"* ]]
ok $? "a name one byte past the documented $name_limit is refused naming $name_limit"
err=$(sqlerr "SELECT mesh_read_file('lim-none', 'x/$(long "$name_limit")')")
[[ "$err" == *"no workspace declared"* ]]
ok $? "a name of exactly $name_limit bytes passes the check"
echo "SELECT mesh_exec('lim-none', ARRAY['$(long $((arg_limit + 1)))'])" > /tmp/lim-$$.sql
err=$(psql -X -qAt -v VERBOSITY=verbose -f /tmp/lim-$$.sql 2>&1 | grep -m1 ERROR)
[[ "$err" == *54000* && "$err" == *"the limit is $arg_limit"* ]]
ok $? "an argv element one byte past the documented $arg_limit is refused naming $arg_limit: ${err:0:90}"
echo "SELECT mesh_exec('lim-none', ARRAY['$(long "$arg_limit")'])" > /tmp/lim-$$.sql
err=$(psql -X -qAt -v VERBOSITY=verbose -f /tmp/lim-$$.sql 2>&1 | grep -m1 ERROR)
[[ "$err" == *"no workspace declared"* ]]
ok $? "an argv element of exactly $arg_limit bytes passes the check"
rm -f /tmp/lim-$$.sql

# the settings-backed limits: the message names the setting and its value in force
stdin_limit=$(q "SELECT setting FROM pg_settings WHERE name = 'mesh.max_stdin_size'")
err=$(sqlerr "SELECT mesh_exec('lim-none', ARRAY['true'], stdin => convert_to(repeat('a', $((stdin_limit + 1))), 'UTF8'))")
[[ "$err" == *54000* && "$err" == *"mesh.max_stdin_size ($stdin_limit bytes)"* ]]
ok $? "a stdin one byte past mesh.max_stdin_size is refused naming the setting and its bytes: ${err:0:100}"
err=$(sqlerr "SELECT mesh_exec('lim-none', ARRAY['true'], stdin => convert_to(repeat('a', $stdin_limit), 'UTF8'))")
[[ "$err" == *"no workspace declared"* ]]
ok $? "a stdin of exactly mesh.max_stdin_size passes the check"
file_limit=$(q "SELECT setting FROM pg_settings WHERE name = 'mesh.max_file_size'")
err=$(sqlerr "SELECT mesh_write_file('lim-none', 'f', convert_to(repeat('a', $((file_limit + 1))), 'UTF8'))")
[[ "$err" == *54000* && "$err" == *"mesh.max_file_size ($file_limit bytes)"* ]]
ok $? "content one byte past mesh.max_file_size is refused naming the setting and its bytes"
grep -qE 'mesh.max_file_size` \(16 MB' "$ROOT/docs/security.md" && [ "$file_limit" -eq 16777216 ]
ok $? "docs/security.md's 16 MB for mesh.max_file_size is the server's ($file_limit bytes)"
done_testing
