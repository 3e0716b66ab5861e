-- Conformance: snippet evaluation (mesh_eval) on backend :backend.  A backend that declares
-- eval: the value from the input, console output, a thrown error, a fresh isolate each time,
-- no file / environment / subprocess / network (the runner's probe stays untouched), the wall
-- time, the evaluation as an exec row, an unknown language refused, and commands refused when
-- it declares no shell.  A backend that does not: mesh_eval refused (0A000) before any backend
-- call, nothing created.  The snippets are JavaScript bodies of an async function of `input`.
\set suite eval
\set eval_suite 1
\ir lib.psql
SELECT :'tag' || '-1' AS run \gset
SELECT NOT :'declares_eval'::boolean AS no_eval \gset

\if :no_eval
SELECT plan(3);
SELECT 1 FROM mesh_acquire(:'run', :'agent', 'conformance') \g /dev/null
SELECT throws_ok(format('SELECT * FROM mesh_eval(%L, ''javascript'', ''return 1'')', :'run'), '0A000', NULL,
                 'backend ' || :'backend' || ' declares no eval: an evaluation is refused (0A000)');
SELECT is((SELECT status || '/' || coalesce(external_ref, 'none') FROM mesh.workspaces WHERE run_id = :'run'),
          'pending/none', 'before any backend call: nothing was created for the run');
SELECT is((SELECT count(*) FROM mesh.execs WHERE run_id = :'run'), 0::bigint, 'and no exec row was written');
SELECT mesh_release(:'run') \g /dev/null
SELECT * FROM finish();
\else
SELECT plan(14);
SELECT 1 FROM mesh_acquire(:'run', :'agent', 'conformance') \g /dev/null
-- one evaluation, as a row
CREATE FUNCTION pg_temp.ev(run text, code text, input jsonb DEFAULT NULL, timeout interval DEFAULT NULL)
RETURNS TABLE (value jsonb, stdout text, error text, status text)
LANGUAGE sql AS $$
  SELECT value, stdout, error, status FROM mesh_eval(run, 'javascript', code, input, timeout)
$$;

SELECT results_eq(format('SELECT value, error IS NULL, status FROM pg_temp.ev(%L, ''return input.a * 2'', ''{"a": 21}'')', :'run'),
                  $$VALUES ('42'::jsonb, true, 'ok')$$, 'the value comes back from the input');
SELECT is((SELECT backend_kind FROM mesh.workspaces WHERE run_id = :'run'), :'backend', 'on the backend under test');
SELECT is((SELECT stdout FROM pg_temp.ev(:'run', 'console.log("hi", 1); return null')), E'hi 1\n', 'console output comes back');
SELECT ok((SELECT error LIKE '%boom%' FROM pg_temp.ev(:'run', 'throw new Error("boom")')),
          'a thrown error is the error');
SELECT pg_temp.ev(:'run', 'globalThis.leak = 5; return 1') \g /dev/null
SELECT is((SELECT value FROM pg_temp.ev(:'run', 'return globalThis.leak ?? "fresh"')), '"fresh"'::jsonb,
          'each evaluation starts in a fresh isolate');

-- nothing of the host: each must fail for want of permission, not of syntax
SELECT ok((SELECT error ~* 'read|permission|capab'
             FROM pg_temp.ev(:'run', 'return Deno.readTextFileSync("/etc/hostname")')), 'no file can be read');
SELECT ok((SELECT error ~* 'env|permission|capab'
             FROM pg_temp.ev(:'run', 'return Deno.env.get("PATH")')), 'the environment cannot be read');
SELECT ok((SELECT error ~* 'run|permission|capab'
             FROM pg_temp.ev(:'run', 'return new Deno.Command("/bin/true").outputSync().code')), 'no process can be spawned');
SELECT ok((SELECT error ~* 'net|permission|capab'
             FROM pg_temp.ev(:'run', format('return (await fetch("http://127.0.0.1:%s/")).status', :'probe_port'))),
          'the runner''s probe on the host''s loopback cannot be reached');
SELECT is(pg_read_file(:'probe_hits'), '', 'and the probe saw no connection');

-- bounds and records
SELECT ok((SELECT status = 'timeout' OR error LIKE '%wall time%'
             FROM pg_temp.ev(:'run', 'while (true) {}', NULL, '1 second')), 'a busy loop is stopped at its wall time');
SELECT is((SELECT count(*) FILTER (WHERE status = 'running') || '/' || (count(*) >= 10)
             FROM mesh.execs WHERE run_id = :'run'), '0/true', 'every evaluation is an exec row, none left running');
SELECT throws_ok(format('SELECT * FROM mesh_eval(%L, ''cobol'', ''DISPLAY 1'')', :'run'), '0A000', NULL,
                 'a language the backend does not offer is refused (0A000)');
\if :declares_shell
SELECT pass('the backend declares shell too: commands are covered by the other files');
\else
SELECT throws_ok(format('SELECT * FROM mesh_exec(%L, ARRAY[''true''])', :'run'), '0A000', NULL,
                 'a command on the evaluating run is refused by capability (0A000)');
\endif
SELECT mesh_release(:'run') \g /dev/null
SELECT * FROM finish();
\endif
