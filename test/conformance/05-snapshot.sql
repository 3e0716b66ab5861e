-- Conformance: project-state snapshots on :backend, for backends that declare "snapshot":
-- a capture holds the run's /workspace (not the base image), a run of the same project and a
-- fork (from_snapshot) start from it as their own copy-on-write view, files keep their bytes
-- and modes, and a released fork leaves the snapshot as it was.  A backend without the
-- capability is checked for the honest refusal and the reason in the set-up NOTICE.
\set suite snapshot
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-src' AS src \gset
SELECT :'tag' || '-next' AS next \gset
SELECT :'tag' || '-fork' AS fork \gset
SELECT 'conformance/' || :'tag' AS project \gset
SELECT plan(9);

SELECT is((SELECT project FROM mesh_acquire(:'src', :'agent', 'conformance', project => :'project')), :'project',
          'a run declares its project');
SELECT is((SELECT exit_code FROM pg_temp.x(:'src', ARRAY['sh', '-c',
          'mkdir -p deps/a && printf ''\001\002\377'' > deps/a/bin && chmod 751 deps/a/bin && echo src > state'])), 0,
          'and writes a project tree');
SELECT pg_temp.has_cap(:'src', 'snapshot') AS can_snapshot \gset
\if :can_snapshot
SELECT is((SELECT status::text FROM mesh_snapshot(:'src')), 'ready', 'the tree is captured as the project''s current snapshot');
SELECT is((SELECT exit_code FROM pg_temp.x(:'src', ARRAY['sh', '-c', 'echo changed > state'])), 0,
          'the run keeps working after its capture');
SELECT is((SELECT 1 FROM mesh_acquire(:'next', :'agent', 'conformance', project => :'project')), 1, 'a later run of the project');
SELECT is((SELECT stdout FROM pg_temp.x(:'next', ARRAY['sh', '-c', 'cat state; od -An -tx1 deps/a/bin; stat -c %a deps/a/bin; test -e /etc/passwd && echo base-present'])),
          E'src\n 01 02 ff\n751\nbase-present\n',
          'starts from the snapshot: bytes and modes as captured, the source''s later writes absent, the base image its own');
SELECT is((SELECT 1 FROM mesh_acquire(:'fork', :'agent', 'conformance',
                                      from_snapshot => (SELECT id FROM mesh.snapshots WHERE source_run_id = :'src'))), 1,
          'a fork names the snapshot');
SELECT is((SELECT stdout FROM pg_temp.x(:'fork', ARRAY['sh', '-c', 'echo fork > state; rm -r deps; cat state'])), E'fork\n',
          'and changes its own view');
\o /dev/null
SELECT mesh_release(:'fork');
\o
SELECT is((SELECT stdout FROM pg_temp.x(:'next', ARRAY['sh', '-c', 'cat state; ls deps/a'])), E'src\nbin\n',
          'which the other run of the project never sees');
\o /dev/null
SELECT mesh_release(:'next');
\o
\else
SELECT throws_ok(format('SELECT mesh_snapshot(%L)', :'src'), '0A000', NULL,
                 'a backend without the capability refuses to capture, with the reason');
SELECT is((SELECT count(*)::int FROM mesh.snapshots WHERE source_run_id = :'src'), 0, 'and writes no snapshot row');
SELECT skip('backend ' || :'backend' || ' does not declare the snapshot capability', 5);
\endif
\o /dev/null
SELECT mesh_release(:'src');
\o
SELECT * FROM finish();
\endif
