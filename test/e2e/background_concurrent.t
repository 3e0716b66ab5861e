#!/usr/bin/env bash
# Background commands from many clients at once: 8 runs, each from its own session, start 3
# background commands that print their own run's and command's name 2 000 times; every
# command's stored output is its own (nothing mixed between runs or commands, nothing lost),
# every row ends ok, and the workers' followers leave no call behind (mesh_exec still answers).
. "$(dirname "$0")/lib.sh"
plan 5
tag=bgc-$$
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

client() {   # client N: one run, three background commands, waits for each
  local run=$tag-$1 ids
  psql -X -qAt -v ON_ERROR_STOP=1 -c "SELECT 1 FROM mesh_acquire('$run', 'bgc-agent', 'bgc')" >/dev/null || return 1
  ids=$(psql -X -qAt -v ON_ERROR_STOP=1 -c "
    SELECT mesh_exec_start('$run', ARRAY['sh', '-c', 'i=0; while [ \$i -lt 2000 ]; do echo \"$run/' || c || ' \$i\"; i=\$((i+1)); done'])
      FROM generate_series(1, 3) c") || return 1
  for id in $ids; do
    psql -X -qAt -c "SELECT $id || ' ' || status FROM mesh_exec_wait($id, '120 seconds')" || return 1
  done
}
export -f client
export tag PGOPTIONS="-c client_min_messages=warning"
seq 1 8 | xargs -P 8 -I{} bash -c 'client {}' > "$work/ends" 2> "$work/errors"
ok $? "8 clients started 24 background commands and waited for them ($(head -c 200 "$work/errors"))"
is "$(awk '{print $2}' "$work/ends" | sort | uniq -c | awk '{print $1 " " $2}')" "24 ok" "every command ended ok"

# each command's output is exactly its own 2 000 lines
bad=0
while read -r id status; do
  want=$(q "SELECT e.run_id || '/' || (SELECT count(*) FROM mesh.execs o WHERE o.run_id = e.run_id AND o.id <= e.id)
            FROM mesh.execs e WHERE e.id = $id")
  got=$(q "SELECT md5(data) FROM mesh_exec_output_bytes($id)")
  exp=$(i=0; while [ $i -lt 2000 ]; do echo "$want $i"; i=$((i+1)); done | md5sum | cut -d' ' -f1)
  [ "$got" = "$exp" ] || { bad=$((bad + 1)); echo "# exec $id: output is not its own ($want)"; }
done < "$work/ends"
is "$bad" 0 "every command's stored output is its own, whole, in order"
is "$(q "SELECT count(*) FROM mesh.execs WHERE run_id LIKE '$tag-%' AND status = 'running'")" 0 \
   "no row is left running"
is "$(q "SELECT stdout FROM mesh_exec('$tag-1', ARRAY['echo', 'still here'])")" "still here" \
   "the pool still answers calls"
for n in $(seq 1 8); do q "SELECT mesh_release('$tag-$n')" >/dev/null; done
done_testing
