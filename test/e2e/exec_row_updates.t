#!/usr/bin/env bash
# An exec with output costs its workspace row two updates, not three: mesh.exec_begin marks the
# workspace used, and mesh.exec_finish records the charge, the use and the bytes of output stored
# with the end (the run's output quota) in one update (issue: set-based worker turns). Counted by
# a trigger this test puts on mesh.workspaces and takes off again; the quota arithmetic is checked
# against what mesh.exec_output holds.
. "$(dirname "$0")/lib.sh"
plan 5
RUN="rowupd-$$"

cleanup() {
  q "DROP TRIGGER IF EXISTS count_updates ON mesh.workspaces;
     DROP FUNCTION IF EXISTS public.rowupd_count();
     DROP TABLE IF EXISTS public.rowupd_log" >/dev/null 2>&1
  q "SELECT mesh_release('$RUN')" >/dev/null 2>&1
}
trap cleanup EXIT
q "CREATE TABLE public.rowupd_log (workspace_id bigint, output_bytes bigint);
   CREATE FUNCTION public.rowupd_count() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
     SET search_path = pg_catalog AS \$\$
   BEGIN INSERT INTO public.rowupd_log VALUES (NEW.id, NEW.output_bytes); RETURN NEW; END \$\$;
   CREATE TRIGGER count_updates AFTER UPDATE ON mesh.workspaces FOR EACH ROW EXECUTE FUNCTION public.rowupd_count()" >/dev/null

q "SELECT 1 FROM mesh_acquire('$RUN', 'rowupd-agent', 'tester')" >/dev/null
is "$(q "SELECT exit_code FROM mesh_exec('$RUN', ARRAY['true'])")" "0" "the run's workspace is made by a first exec"
ws=$(q "SELECT id FROM mesh.workspaces WHERE run_id = '$RUN'")
before=$(q "SELECT output_bytes FROM mesh.workspaces WHERE id = $ws")
q "DELETE FROM public.rowupd_log" >/dev/null

out=$(q "SELECT stdout FROM mesh_exec('$RUN', ARRAY['sh', '-c', 'printf 0123456789; printf abc >&2'])")
is "$out" "0123456789" "the exec answered with its output"
updates=$(q "SELECT count(*) FROM public.rowupd_log WHERE workspace_id = $ws")
is "$updates" "2" "the workspace row was updated twice for the exec (begin, and end with its output)"
stored=$(q "SELECT coalesce(sum(length(o.data)), 0) FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id
            WHERE e.workspace_id = $ws AND e.id = (SELECT max(id) FROM mesh.execs WHERE workspace_id = $ws)")
is "$stored" "13" "both streams were stored (13 bytes)"
is "$(q "SELECT output_bytes - $before FROM mesh.workspaces WHERE id = $ws")" "13" \
   "the run's output quota was charged exactly the stored bytes"
done_testing
