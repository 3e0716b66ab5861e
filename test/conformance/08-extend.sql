-- Conformance: extending a running command's timeout on :backend (mesh_exec_extend), for
-- backends that declare "extend_timeout": a background command outlives its first deadline once
-- extended and is still ended at the new one.  A backend that runs background commands without
-- the capability is checked for the honest refusal (0A000, the deadline as it was); one that
-- runs none has no running command this file could extend: skipped, visibly.
\set suite extend
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-ext' AS run \gset
SELECT plan(4);
\o /dev/null
SELECT mesh_acquire(:'run', :'agent', 'conformance');
\o
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['true'])), 0, 'the run''s workspace is set up');
SELECT pg_temp.has_cap(:'run', 'background') AS can_background,
       pg_temp.has_cap(:'run', 'extend_timeout') AS can_extend \gset
\if :can_extend
SELECT mesh_exec_start(:'run', ARRAY['sh', '-c', 'sleep 4; echo done'], timeout => '2 seconds') AS id1 \gset
SELECT ok(mesh_exec_extend(:id1, '60 seconds') IS NOT NULL, 'a running command''s deadline moves 60 s later');
SELECT results_eq(format('SELECT status, stdout FROM mesh_exec_wait(%s, ''120 seconds'')', :id1),
                  $$VALUES ('ok'::text, E'done\n'::text)$$,
                  'it runs past its first 2 s to its own end');
SELECT mesh_exec_start(:'run', ARRAY['sleep', '600'], timeout => '1 second') AS id2 \gset
\o /dev/null
SELECT mesh_exec_extend(:id2, '2 seconds');
\o
\o /dev/null
SELECT status FROM mesh_exec_wait(:id2, '120 seconds');
\o
SELECT is((SELECT status::text || '/' || (finished_at - started_at >= interval '2.5 seconds') FROM mesh.execs WHERE id = :id2),
          'timeout/true', 'and is still ended at its new deadline, not its first');
\elif :can_background
SELECT mesh_exec_start(:'run', ARRAY['sleep', '600'], timeout => '5 minutes') AS id1 \gset
SELECT throws_ok(format('SELECT mesh_exec_extend(%s, ''1 minute'')', :id1), '0A000', NULL,
                 'a backend without extend_timeout refuses before any backend call (0A000)');
SELECT is((SELECT timeout_ms FROM mesh.execs WHERE id = :id1), 300000::bigint, 'the deadline is as it was');
SELECT is(mesh_exec_kill(:id1, 'KILL'), true, 'the command is ended by hand');
\else
SELECT skip('backend ' || :'backend' || ' declares neither extend_timeout nor background: no running command to extend', 3);
\endif
\o /dev/null
SELECT mesh_release(:'run');
\o
SELECT * FROM finish();
\endif
