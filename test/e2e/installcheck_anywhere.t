#!/usr/bin/env bash
# `make installcheck` runs against any PostgreSQL 15 server with mesh_exec preloaded
# (README "Running the tests against your server"), not only the suite's cluster: here a
# second cluster configured otherwise (its own port, socket directory and database, named by
# mesh.database; two workers; server defaults that change what psql shows: NOTICEs hidden,
# bytea in escape format), reached only through PGHOST, PGPORT, PGUSER and PGDATABASE.
# Every sql/*.sql file runs (the Makefile lists them), and all pass.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/cluster.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start a cluster as postgres"
plan 6

dir=$(mktemp -d "${MESH_TEST_WORK:-/tmp}/mesh-anywhere.XXXXXX"); chmod 755 "$dir"
port=${MESH_ANYWHERE_PORT:-$((PGPORT + 51))} db=mesh_other_db
trap 'mesh_cluster_stop "$dir/pg"; rm -rf "$dir"' EXIT
(MESH_PORT=$port MESH_DATABASE=$db MESH_DISK_BYTES=${MESH_DISK_BYTES:-536870912} \
   mesh_cluster_start "$dir/pg" "mesh.workers = 2" "client_min_messages = warning" "bytea_output = escape" &&
   mesh_wait_embedded "$dir/pg" && psql -X -q -c "CREATE EXTENSION mesh_exec" && mesh_wait_workers) \
  > "$dir/start.out" 2>&1
ok $? "a second cluster (port $port, database $db) starts with mesh_exec in its mesh.database"
sed 's/^/# /' "$dir/start.out" | tail -5

# the suite's own cluster settings are nowhere in the environment: only the standard PG* ones
run_installcheck() {  # DATABASE OUTPUT-FILE
  env -u PGDIR -u MESH_PORT -u MESH_DATABASE PGHOST="$dir/pg" PGPORT="$port" PGUSER=postgres PGDATABASE="$1" \
    make -s -C "$ROOT" installcheck EXTRA_REGRESS_OPTS="--outputdir=$dir/regress-$1" > "$2" 2>&1
}
mkdir -p "$dir/regress-$db" "$dir/regress-postgres"
run_installcheck "$db" "$dir/installcheck.out"
ok $? "make installcheck passes there"
grep -E 'FAILED|failed' "$dir/installcheck.out" | sed 's/^/# /'
[ -f "$dir/regress-$db/regression.diffs" ] && head -40 "$dir/regress-$db/regression.diffs" | sed 's/^/# /'
grep -q "(using postmaster on $dir/pg, port $port)" "$dir/installcheck.out"
ok $? "pg_regress used that server, from PGHOST and PGPORT"
files=$(find "$ROOT/sql" -maxdepth 1 -name '*.sql' ! -name 'mesh_exec--*' | wc -l)
grep -q "All $files tests passed" "$dir/installcheck.out"
ok $? "all $files sql/*.sql files ran and passed"
is "$(PGHOST=$dir/pg PGPORT=$port psql -X -qAt -d postgres -c "SELECT 'client_min_messages=notice' = ANY (setconfig)
        FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = '$db')")" t \
   "setup gave the database the settings the files expect, over the server's defaults"

# the same run against a database without mesh_exec fails: the pass above is not vacuous
run_installcheck postgres "$dir/installcheck-postgres.out"
[ $? -ne 0 ] && grep -q "FAILED" "$dir/installcheck-postgres.out"
ok $? "against a database without mesh_exec, make installcheck fails"
done_testing
