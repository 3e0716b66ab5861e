-- test/pgtap/null_args.sql: every function the harness or the admin may call answers a NULL
-- where a value is required with SQLSTATE 22004 (null_value_not_allowed), before it looks
-- anything up: the probe calls each one with NULL in one required argument at a time and
-- plausible values in the others.  A function given a NULL check nowhere is caught (the
-- positive control below plants one).  Each function is called as a member of the group it is
-- granted to (the harness's, the admin's), as its real callers would.
BEGIN;
SELECT plan(6);

CREATE ROLE null_probe_harness IN ROLE mesh_harness;
CREATE ROLE null_probe_admin IN ROLE mesh_admin;

CREATE FUNCTION pg_temp.null_probe()
RETURNS TABLE (fn text, arg integer, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    args text[];
    t regtype;
BEGIN
    FOR f IN SELECT p.oid::regprocedure::text AS sig, p.proname, n.nspname, p.pronargs, p.pronargdefaults,
                    p.proargtypes,
                    CASE WHEN has_function_privilege('mesh_harness', p.oid, 'EXECUTE')
                         THEN 'null_probe_harness' ELSE 'null_probe_admin' END AS caller
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE (has_function_privilege('mesh_harness', p.oid, 'EXECUTE')
                     OR has_function_privilege('mesh_admin', p.oid, 'EXECUTE'))
                AND (n.nspname = 'mesh' OR p.proname LIKE 'mesh\_%') AND p.pronargs > 0
                -- helpers of views and functions, not an API (NULL in, NULL out; the NULL check itself)
                AND p.proname NOT IN ('may_drive', 'output_text', 'output_slice', 'require_args',
                                      'exec_channel_name', 'raise_unknown_snapshot', 'snapshot_owned',
                                      'snapshot_usable', 'driver_capabilities')
              ORDER BY 1 LOOP
        FOR i IN 1 .. f.pronargs - f.pronargdefaults LOOP
            args := '{}';
            FOR j IN 1 .. f.pronargs LOOP
                t := f.proargtypes[j - 1];
                args := args || CASE
                    WHEN j = i THEN 'NULL'
                    WHEN t IN ('text'::regtype) THEN quote_literal('nullprobe')
                    WHEN t IN ('bigint'::regtype, 'integer'::regtype, 'double precision'::regtype) THEN '1'
                    WHEN t = 'bytea'::regtype THEN '''\x00''::bytea'
                    WHEN t = 'jsonb'::regtype THEN '''{}''::jsonb'
                    WHEN t = 'interval'::regtype THEN '''1 hour''::interval'
                    WHEN t = 'boolean'::regtype THEN 'true'
                    WHEN t = 'text[]'::regtype THEN 'ARRAY[''true'']'
                    WHEN t = 'regrole'::regtype THEN '''mesh_harness''::regrole'
                    ELSE format('''small''::%s', t) END;
            END LOOP;
            fn := f.sig;
            arg := i;
            BEGIN
                EXECUTE format('SET LOCAL ROLE %I', f.caller);
                EXECUTE format('SELECT %I.%I(%s)', f.nspname, f.proname, array_to_string(args, ','));
                outcome := 'no error';
                RESET ROLE;
            EXCEPTION WHEN OTHERS THEN
                outcome := SQLSTATE || ' ' || SQLERRM;
            END;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;

CREATE TEMP TABLE probed AS SELECT * FROM pg_temp.null_probe();

SELECT cmp_ok((SELECT count(DISTINCT fn)::integer FROM probed), '>=', 30,
              'the probe reaches every function of the API and the admin''s (30 or more)');
SELECT is_empty($$SELECT fn || ' argument ' || arg || ': ' || outcome FROM probed WHERE outcome NOT LIKE '22004 %'$$,
                'a NULL required argument is 22004 everywhere, before anything is looked up');
SELECT is_empty($$SELECT fn || ' argument ' || arg || ': ' || outcome FROM probed
                   WHERE outcome NOT LIKE '%must not be NULL%'$$,
                'and the message says which argument must not be NULL');

-- optional arguments of the output readers have no meaning as NULL either
SELECT throws_ok('SELECT * FROM mesh_exec_output(1, NULL)', '22004', NULL, 'mesh_exec_output: a NULL offset is 22004');
SELECT throws_ok('SELECT * FROM mesh_exec_output_bytes(1, ''stdout'', 0, NULL)', '22004', NULL,
                 'mesh_exec_output_bytes: a NULL max_bytes is 22004');

-- positive control: a function with no NULL check is caught by the same probe
CREATE FUNCTION mesh.null_probe_control(name text) RETURNS text LANGUAGE sql AS $$ SELECT 'took ' || coalesce(name, 'NULL') $$;
GRANT EXECUTE ON FUNCTION mesh.null_probe_control(text) TO mesh_admin;
SELECT results_eq($$SELECT outcome FROM pg_temp.null_probe() WHERE fn = 'mesh.null_probe_control(text)'$$,
                  $$VALUES ('no error')$$, 'the probe reports a function that takes a NULL silently');

SELECT * FROM finish();
ROLLBACK;
