-- Conformance: release outcomes on :backend: never materialized, destroyed, refused after
-- release, idempotent; idle hibernation that keeps files (backends with "hibernate");
-- the reaper's reconciliation lists the backend.
\set suite release
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-chat' AS chat \gset
SELECT :'tag' || '-1' AS run \gset
SELECT :'tag' || '-idle' AS idle \gset
SELECT plan(13);

SELECT is((SELECT status FROM mesh_acquire(:'chat', :'agent', 'conformance')), 'pending', 'a run that never executes');
SELECT is(mesh_release(:'chat'), 'never materialized', 'releases as never materialized');

SELECT is((SELECT status FROM mesh_acquire(:'run', :'agent', 'conformance')), 'pending', 'a run is declared');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['true'])), 0, 'and materialized');
SELECT is(mesh_release(:'run', 'conformance done'), 'destroyed', 'release destroys the sandbox');
SELECT results_eq(format('SELECT status::text, release_outcome, release_reason FROM mesh.workspaces WHERE run_id = %L', :'run'),
                  $$VALUES ('released', 'destroyed', 'conformance done')$$, 'the row records the outcome and reason');
SELECT throws_ok(format('SELECT * FROM mesh_exec(%L, ARRAY[''true''])', :'run'), '55000', NULL,
                 'a released run cannot exec');
SELECT is(mesh_release(:'run'), 'already released', 'a second release is harmless');

-- idle hibernation keeps the files and wakes on the next use
SELECT is((SELECT status FROM mesh_acquire(:'idle', :'agent', 'conformance')), 'pending', 'an idle-prone run is declared');
SELECT is((SELECT exit_code FROM pg_temp.x(:'idle', ARRAY['sh', '-c', 'echo kept > note.txt'])), 0, 'and writes a file');
SELECT pg_temp.has_cap(:'idle', 'hibernate') AS can_hibernate \gset
\if :can_hibernate
\o /dev/null
SELECT mesh.run_set_budget(:'idle', idle_timeout => '1 second');
SELECT pg_sleep(1.5);
SELECT mesh.sweep();
SELECT mesh.run_set_budget(:'idle', idle_timeout => '1 hour');
\o
SELECT is((SELECT stdout FROM pg_temp.x(:'idle', ARRAY['cat', 'note.txt'])), E'kept\n',
          'after idle hibernation the run wakes with its files');
SELECT is((SELECT count(*) FROM mesh.events WHERE run_id = :'idle' AND kind = 'hibernated'), 1::bigint,
          'the hibernation is recorded');
\else
SELECT skip('backend ' || :'backend' || ' does not declare the hibernate capability', 2);
\endif
SELECT matches((SELECT string_agg(detail, ',') FROM mesh.sweep() WHERE action = 'reconciled' AND backend = :'backend'),
               '^[1-9][0-9]* sandbox', 'the reaper''s reconciliation lists the live sandbox on this backend');
SELECT mesh_release(:'idle') \g /dev/null
SELECT * FROM finish();
\endif
