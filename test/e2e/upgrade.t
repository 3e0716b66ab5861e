#!/usr/bin/env bash
# Upgrades are versioned: each released version (0.1, 1.0) installed and updated with ALTER EXTENSION
# ... UPDATE has exactly the catalog of a fresh install of the current version (tables, columns, types, defaults, constraints,
# indexes, functions with signatures, volatility, SECURITY and search_path, grants, policies,
# config-dump marks: test/lib/catalog.sql), keeps its configuration rows, and until it is updated
# the library refuses to serve it with an error that says what to run.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OLD=mesh_upgrade_old MID=mesh_upgrade_mid NEW=mesh_upgrade_new
# the version this library serves: the control file's default
CUR=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$ROOT/mesh_exec.control")
plan 15

qd() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
catalog() { psql -X -qAt -v ON_ERROR_STOP=1 -d "$1" -f "$ROOT/test/lib/catalog.sql"; }
cleanup() { for d in $OLD $MID $NEW; do psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1; done; }
trap cleanup EXIT
cleanup
qd postgres "CREATE DATABASE $OLD" && qd postgres "CREATE DATABASE $MID" && qd postgres "CREATE DATABASE $NEW"

versions=$(q "SELECT string_agg(version, ' ' ORDER BY version) FROM pg_available_extension_versions WHERE name = 'mesh_exec'")
is "$versions" "0.1 1.0 $CUR" "the released 0.1 and 1.0 and the current $CUR are installable"

qd $OLD "CREATE EXTENSION mesh_exec VERSION '0.1'"
ok $? "0.1 installs from its own script against this library"
# configuration an operator made on 0.1, including a hand-saved egress row that names no mode
qd $OLD "SELECT mesh.backend_add('remote', 'sandboxd', '{\"url\": \"http://127.0.0.1:1\"}', false);
         SELECT mesh.agent_set('upgrader', default_size => 'large');
         INSERT INTO mesh.egress_settings (policy) VALUES ('{\"domains\": [\"kept.example.org\"]}')" >/dev/null

# the library serves $CUR only: a harness call against the 0.1 SQL is refused, with the fix
err=$(qd $OLD "SELECT * FROM mesh_exec('never-served', ARRAY['true'])" 2>&1)
echo "$err" | grep -q "library is version $CUR but database \"$OLD\" holds its SQL at version 0.1"
ok $? "a 0.1 database is refused by the $CUR library, naming both versions"
echo "$err" | grep -q "ALTER EXTENSION mesh_exec UPDATE"
ok $? "the refusal's hint says what to run"
is "$(qd $OLD "SELECT count(*) FROM mesh.execs")" "0" "the refused call recorded nothing"

qd $OLD "ALTER EXTENSION mesh_exec UPDATE"
ok $? "ALTER EXTENSION mesh_exec UPDATE runs"
is "$(qd $OLD "SELECT extversion FROM pg_extension WHERE extname = 'mesh_exec'")" "$CUR" "the database is at $CUR (through every upgrade script between)"

qd $NEW "CREATE EXTENSION mesh_exec"
diffs=$(diff <(catalog $OLD) <(catalog $NEW))
is "$diffs" "" "the catalog updated from 0.1 equals a fresh $CUR install's"
[ "$(catalog $NEW | wc -l)" -gt 500 ]
ok $? "the comparison covers the whole catalog ($(catalog $NEW | wc -l) facts)"

# the last release, 1.0, updated to the current version the same way
qd $MID "CREATE EXTENSION mesh_exec VERSION '1.0'"
ok $? "1.0 installs from its own (frozen) script"
qd $MID "ALTER EXTENSION mesh_exec UPDATE" >/dev/null
is "$(qd $MID "SELECT extversion FROM pg_extension WHERE extname = 'mesh_exec'")" "$CUR" "1.0 updates to $CUR"
is "$(diff <(catalog $MID) <(catalog $NEW))" "" "the catalog updated from 1.0 equals a fresh $CUR install's"

# positive control: the comparison sees a one-attribute change
qd $NEW "ALTER FUNCTION mesh.random_id() STABLE"
[ -n "$(diff <(catalog $OLD) <(catalog $NEW))" ]
ok $? "a changed volatility shows as a difference (the comparison can fail)"

is "$(qd $OLD "SELECT (SELECT count(*) FROM mesh.backends WHERE name = 'remote' AND NOT enabled)
                  || ' ' || (SELECT default_size FROM mesh.agents WHERE agent_id = 'upgrader')")" "1 large" \
   "configuration made on 0.1 is kept"
is "$(qd $OLD "SELECT mesh.egress_policy()->>'mode' || ' ' || (mesh.egress_policy()->'domains' ? 'kept.example.org')::text")" \
   "allowlist true" "a saved egress row without a mode keeps its allowlist behaviour through the upgrade"
done_testing
