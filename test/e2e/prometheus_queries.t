#!/usr/bin/env bash
# deploy/prometheus/mesh_exec_queries.yaml, the statistics views as postgres_exporter custom
# queries: the file parses as YAML in that format (each entry a mesh_* namespace with a query
# and metrics whose usage the exporter knows), and each query runs, as a pg_monitor member as
# the exporter would, against the views, returning exactly the columns its metrics name, with
# numbers (or NULL) in every metric column.  A copy with a renamed column is caught, so the
# comparison can fail.  Needs python3 with PyYAML (python3-yaml, test/lib/deps.sh).
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
file=$root/deploy/prometheus/mesh_exec_queries.yaml
PY=/usr/bin/python3
plan 16

# the file as JSON, checked for the exporter's format: one line per problem after the JSON
entries=$($PY - "$file" <<'EOF' 2>&1
import json, sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
problems, out = [], []
for name, e in (doc or {}).items():
    if not name.startswith("mesh_"):
        problems.append(f"{name}: not a mesh_* namespace")
    if not isinstance(e.get("query"), str) or not e["query"].strip():
        problems.append(f"{name}: no query")
    if e.get("master") is not True:
        problems.append(f"{name}: not master (would run in every database)")
    metrics = []
    for m in e.get("metrics") or []:
        (col, spec), = m.items()
        if spec.get("usage") not in ("LABEL", "COUNTER", "GAUGE", "DISCARD", "DURATION", "HISTOGRAM"):
            problems.append(f"{name}.{col}: usage {spec.get('usage')!r}")
        if not spec.get("description"):
            problems.append(f"{name}.{col}: no description")
        metrics.append({"column": col, "usage": spec.get("usage")})
    if not metrics:
        problems.append(f"{name}: no metrics")
    out.append({"name": name, "query": e.get("query", ""), "metrics": metrics})
print(json.dumps(out))
for p in problems:
    print(p)
EOF
)
json=$(head -1 <<<"$entries")
problems=$(tail -n +2 <<<"$entries")
[ -z "$problems" ] && jq -e 'length > 0' <<<"$json" >/dev/null
ok $? "the file parses as postgres_exporter custom queries: mesh_* namespaces, master, known usages, descriptions"
[ -n "$problems" ] && echo "$problems" | sed 's/^/#   /'
is "$(jq -r '[.[].name] | join(" ")' <<<"$json" 2>/dev/null)" \
   "mesh_stat_backends mesh_stat_backend_latency mesh_stat_workers mesh_stat_agents" "it exports the four statistics views"

# some calls, so every view has rows: a declaration, a command, a refused read
run="prom-$$"
q "SELECT 1 FROM mesh_acquire('$run', 'agent-prom', 'prom')" >/dev/null
q "SELECT exit_code FROM mesh_exec('$run', ARRAY['true'])" >/dev/null
q "SELECT mesh_read_file('$run', '/etc/passwd')" >/dev/null 2>&1

# run_as_monitor QUERY: the query's CSV, run as pg_monitor as the exporter's role would be
run_as_monitor() { psql -X -q -v ON_ERROR_STOP=1 --csv -c "SET ROLE pg_monitor" -c "$1" 2>&1; }

# columns NAME CSV: the header equals the entry's metric columns and there are rows; says why not
columns() {
  local want got
  want=$(jq -r --arg n "$1" '.[] | select(.name == $n) | [.metrics[] | .column as $c
           | if .usage == "HISTOGRAM" then ($c, $c + "_bucket", $c + "_sum", $c + "_count") else $c end]
           | sort | join(",")' <<<"$json")
  got=$(head -1 <<<"$2" | tr ',' '\n' | sort | paste -sd,)
  [ "$got" = "$want" ] || { echo "columns $got, metrics $want"; return 1; }
  [ "$(wc -l <<<"$2")" -ge 2 ] || { echo "no rows"; return 1; }
}

# numbers NAME CSV: every COUNTER/GAUGE column holds a number or NULL; says which does not
numbers_py='
import csv, json, sys
metrics = {m["column"]: m["usage"] for m in json.loads(sys.argv[1])}
def array(text):
    return [float(x) for x in text.strip("{}").split(",")]
for row in csv.DictReader(sys.stdin):
    for col, value in row.items():
        usage = metrics.get(col)
        if usage == "HISTOGRAM":
            # bounds rising, counts below them never falling and at most the count
            le, below = array(value), array(row[col + "_bucket"])
            count = float(row[col + "_count"]); float(row[col + "_sum"])
            if len(le) != len(below) or le != sorted(le) or below != sorted(below) or below[-1] > count:
                print(f"{col}: bounds {le} counts {below} of {count} is no histogram"); sys.exit(1)
        elif usage not in ("LABEL", "DISCARD") and not col.startswith(tuple(c + "_" for c, u in metrics.items() if u == "HISTOGRAM")) and value != "":
            try:
                float(value)
            except ValueError:
                print(f"{col} = {value!r} is not a number"); sys.exit(1)
'
numbers() {
  $PY -c "$numbers_py" "$(jq -c --arg n "$1" '.[] | select(.name == $n) | .metrics' <<<"$json")" <<<"$2"
}

for name in mesh_stat_backends mesh_stat_backend_latency mesh_stat_workers mesh_stat_agents; do
  query=$(jq -r --arg n "$name" '.[] | select(.name == $n) | .query' <<<"$json")
  csv=$(run_as_monitor "$query"); rc=$?
  ok $rc "$name: its query runs as a pg_monitor member"
  [ $rc -eq 0 ] || head -3 <<<"$csv" | sed 's/^/#   /'
  why=$(columns "$name" "$csv")
  ok $? "$name: it returns exactly the columns its metrics name, with rows"
  [ -n "$why" ] && echo "#   $why"
  why=$(numbers "$name" "$csv")
  ok $? "$name: its metric columns hold numbers (or NULL, NaN to the exporter)"
  [ -n "$why" ] && echo "#   $why"
done

# positive control: a query whose column no longer matches its metric is caught
query=$(jq -r '.[] | select(.name == "mesh_stat_backends") | .query' <<<"$json" | sed 's/AS calls_total/AS calls_count/')
why=$(columns mesh_stat_backends "$(run_as_monitor "$query")")
grep -q "^columns .*calls_count" <<<"$why"
ok $? "a query that renamed a metric's column is caught (the comparison can fail)"

# ... and one whose bucket counts fall (here: reversed) is no histogram
query=$(jq -r '.[] | select(.name == "mesh_stat_backend_latency") | .query' <<<"$json" |
        sed 's/calls_below AS seconds_bucket/array(SELECT c FROM unnest(calls_below) c ORDER BY c DESC) AS seconds_bucket/')
why=$(numbers mesh_stat_backend_latency "$(run_as_monitor "$query")")
grep -q "is no histogram" <<<"$why"
ok $? "a histogram whose bucket counts fall is caught"
echo "#   ${why:0:120}"

q "SELECT mesh_release('$run', 'prometheus test done') IS NOT NULL" >/dev/null
done_testing
