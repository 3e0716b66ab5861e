-- privilege_escalation: a mesh_harness member who may create in schema
-- public (every database made before PostgreSQL 15 allows it) plants
-- look-alikes of the functions and operators the mesh workers, the reaper
-- and the broker use, each one better matched than pg_catalog's.  Then it
-- drives acquisitions, execs with delivered secrets, egress denials, file
-- calls, a broker read, a sweep and releases.  None of the look-alikes runs,
-- and the member does not become superuser.
GRANT CREATE ON SCHEMA public TO PUBLIC;
CREATE ROLE planter IN ROLE mesh_harness;
CREATE TABLE public.hijacked (name text, by_role text);
GRANT INSERT, SELECT, DELETE ON public.hijacked TO PUBLIC;
SELECT mesh.secret_set('agent-pe', 'pe_key', 'pe-secret-value-1') >= 1 AS secret_set;
SELECT mesh.environment_set('pe-env', '[{"kind": "secret", "name": "pe_key", "as": "PE_KEY"}]');
-- an agent holding secrets is the admin's to give (run ownership)
SELECT mesh.agent_grant('agent-pe', 'planter');
SELECT mesh.set_egress_policy('{"mode": "allowlist"}') ->> 'mode' AS egress_mode;
-- who the workers' statements run as: an event trigger of the test's own
CREATE TABLE public.event_writers (kind text, by_role text, super boolean);
GRANT INSERT ON public.event_writers TO mesh_worker;
CREATE FUNCTION public.note_event_writer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.event_writers
  SELECT NEW.kind, current_user, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;
  RETURN NEW;
END $$;
CREATE TRIGGER note_event_writer AFTER INSERT ON mesh.events
  FOR EACH ROW EXECUTE FUNCTION public.note_event_writer();

SET ROLE planter;
-- the trap: record that it ran and as whom, then try to become superuser
CREATE FUNCTION public.trap(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.hijacked VALUES (what, current_user);
  BEGIN
    EXECUTE 'ALTER ROLE planter SUPERUSER';
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  RETURN true;
END $$;
-- functions, with the argument types the workers pass
CREATE FUNCTION public.row_to_json(mesh.workspaces) RETURNS json
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('row_to_json') THEN '{}'::json END $$;
CREATE FUNCTION public.json_populate_record(mesh.workspaces, json) RETURNS mesh.workspaces
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('json_populate_record') THEN $1 END $$;
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text
  LANGUAGE sql AS $$ SELECT x FROM pg_catalog.unnest($1) x WHERE public.trap('unnest') $$;
CREATE FUNCTION public.jsonb_build_object(text, text, text, boolean, text, bigint) RETURNS jsonb
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('jsonb_build_object/6') THEN '{}'::jsonb END $$;
CREATE FUNCTION public.jsonb_build_object(text, text, text, integer, text, text, text, text, text, bigint)
  RETURNS jsonb
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('jsonb_build_object/10') THEN '{}'::jsonb END $$;
CREATE FUNCTION public.jsonb_build_object(text, text, text, text, text, text) RETURNS jsonb
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('jsonb_build_object/6t') THEN '{}'::jsonb END $$;
CREATE FUNCTION public.jsonb_build_object(text, text, text, text, text, bigint) RETURNS jsonb
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('jsonb_build_object/6b') THEN '{}'::jsonb END $$;
-- names the extension's own functions use, which admins and the workers call
CREATE FUNCTION public.to_jsonb(text[]) RETURNS jsonb
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('to_jsonb') THEN '[]'::jsonb END $$;
CREATE FUNCTION public.format(text, text) RETURNS text
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('format') THEN $1 END $$;
-- same names and signatures as pg_catalog's: pg_catalog must stay first
CREATE FUNCTION public.decode(text, text) RETURNS bytea
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('decode') THEN ''::bytea END $$;
CREATE FUNCTION public.now() RETURNS timestamptz
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('now') THEN pg_catalog.now() END $$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('clock_timestamp') THEN pg_catalog.now() END $$;
CREATE FUNCTION public.hashtext(text) RETURNS integer
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('hashtext') THEN 0 END $$;
CREATE FUNCTION public.json_array_elements_text(json) RETURNS SETOF text
  LANGUAGE sql AS $$ SELECT 'x' WHERE public.trap('json_array_elements_text') $$;
CREATE FUNCTION public.json_object_keys(json) RETURNS SETOF text
  LANGUAGE sql AS $$ SELECT 'x' WHERE public.trap('json_object_keys') $$;
CREATE FUNCTION public.jsonb_array_elements(jsonb) RETURNS SETOF jsonb
  LANGUAGE sql AS $$ SELECT '{}'::jsonb WHERE public.trap('jsonb_array_elements') $$;
CREATE FUNCTION public.trap_sfunc(text, text, text) RETURNS text
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('string_agg') THEN $1 END $$;
CREATE AGGREGATE public.string_agg(text, text) (sfunc = public.trap_sfunc, stype = text);
CREATE FUNCTION public.trap_count(bigint) RETURNS bigint
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('count') THEN $1 END $$;
CREATE AGGREGATE public.count(*) (sfunc = public.trap_count, stype = bigint, initcond = '0');
CREATE FUNCTION public.trap_sum(double precision, double precision) RETURNS double precision
  LANGUAGE sql AS $$ SELECT CASE WHEN public.trap('sum') THEN $1 END $$;
CREATE AGGREGATE public.sum(double precision) (sfunc = public.trap_sum, stype = double precision);
-- operators on the extension's enum types, where pg_catalog's are only polymorphic
CREATE FUNCTION public.ws_eq(mesh.workspace_status, mesh.workspace_status) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.trap('=(workspace_status)') AND $1::text = $2::text $$;
CREATE FUNCTION public.ws_ne(mesh.workspace_status, mesh.workspace_status) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.trap('<>(workspace_status)') AND $1::text <> $2::text $$;
CREATE FUNCTION public.ex_eq(mesh.exec_status, mesh.exec_status) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.trap('=(exec_status)') AND $1::text = $2::text $$;
CREATE OPERATOR public.= (leftarg = mesh.workspace_status, rightarg = mesh.workspace_status, function = public.ws_eq);
CREATE OPERATOR public.<> (leftarg = mesh.workspace_status, rightarg = mesh.workspace_status, function = public.ws_ne);
CREATE OPERATOR public.= (leftarg = mesh.exec_status, rightarg = mesh.exec_status, function = public.ex_eq);
-- the look-alikes would win here: this session resolves to them
SELECT 'ready'::mesh.workspace_status = 'ready' AS planted_operator_answers;
SELECT count(*) AS planted_trap_calls FROM public.hijacked;
DELETE FROM public.hijacked;

-- drive every path of the workers, the reaper and the broker
SELECT status FROM mesh_acquire('pe-run', 'agent-pe', 'mallory', environment => 'pe-env');
SELECT status FROM mesh_acquire('pe-run', 'agent-pe', 'mallory', environment => 'pe-env');
SELECT exit_code, stdout, status FROM mesh_exec('pe-run', ARRAY['sh', '-c', 'echo "$PE_KEY" | wc -c'],
                                                env => '{"A": "1"}');
SELECT stdout FROM mesh_exec('pe-run', ARRAY['sh', '-c',
  'curl -s -m 5 --unix-socket /run/mesh/broker.sock -X POST -H "Authorization: Bearer $(cat /workspace/.mesh/run-token)" http://mesh/v1/secrets/pe_key | wc -c']);
SELECT stdout FROM mesh_exec('pe-run', ARRAY['curl', '-s', '-m', '5', '-o', '/dev/null', '-w', '%{http_code}',
                                             'http://not-listed.invalid/']);
SELECT mesh_write_file('pe-run', 'a.txt', 'abc');
SELECT convert_from(mesh_read_file('pe-run', 'a.txt'), 'UTF8');
SELECT status FROM mesh_acquire('pe-run-2', 'agent-pe', 'mallory');
SELECT mesh_release('pe-run-2');
SELECT mesh_release('pe-run');
RESET ROLE;
SELECT count(*) >= 0 AS swept FROM mesh.sweep();
-- what an admin calls resolves its names inside the function too
SELECT mesh.secret_set('agent-pe', 'pe_key', 'pe-secret-value-2') >= 2 AS rotated;
SELECT mesh.egress_policy() ->> 'mode' AS egress_mode;

-- none ran, as anybody; the member is no superuser
SELECT name, by_role FROM public.hijacked;
SELECT rolsuper FROM pg_roles WHERE rolname = 'planter';
-- the workers, the reaper and the broker wrote their events as mesh_worker, no superuser
SELECT by_role, super, string_agg(DISTINCT kind, ', ' ORDER BY kind) AS kinds
  FROM public.event_writers
 WHERE kind IN ('acquiring', 'acquired', 'token_minted', 'secret_read', 'egress_denied',
                'file_write', 'file_read', 'released')
 GROUP BY by_role, super;
SELECT count(*) AS egress_denials FROM mesh.events WHERE run_id = 'pe-run' AND kind = 'egress_denied';
SELECT count(*) AS secret_reads FROM mesh.events WHERE run_id = 'pe-run' AND kind = 'secret_read';

-- mesh_worker: no login, no superuser, no attributes, no members; rows only
SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication
  FROM pg_roles WHERE rolname = 'mesh_worker';
SELECT count(*) AS members FROM pg_auth_members WHERE roleid = 'mesh_worker'::regrole;
SELECT count(*) AS deletable_tables FROM pg_class c
 WHERE c.relnamespace = 'mesh'::regnamespace AND c.relkind = 'r'
   AND has_table_privilege('mesh_worker', c.oid, 'DELETE');
SELECT has_schema_privilege('mesh_worker', 'mesh', 'CREATE') AS creates_in_mesh;

-- every mesh function sets its own search_path, pg_catalog first
SELECT p.oid::regprocedure AS without_pinned_search_path FROM pg_proc p
 WHERE p.pronamespace = 'mesh'::regnamespace
   AND p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c')
   AND NOT coalesce('search_path=pg_catalog, mesh, pg_temp' = ANY (p.proconfig)
                    OR 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false);

DROP TRIGGER note_event_writer ON mesh.events;
DROP FUNCTION public.note_event_writer();
DROP TABLE public.event_writers;
DROP OWNED BY planter;
DROP ROLE planter;
DROP TABLE public.hijacked;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SELECT mesh.set_egress_policy('{"mode": "open"}') ->> 'mode' AS egress_mode;
