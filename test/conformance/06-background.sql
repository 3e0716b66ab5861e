-- Conformance: background commands on :backend, for backends that declare "background": a
-- started command takes stdin, runs on between calls with its output arriving as it is written,
-- ends by itself (its exit code), by mesh_exec_kill (TERM, the whole tree), by its timeout or by
-- the release of its workspace, each end recorded as mesh_exec records one.  A backend without
-- the capability is checked for the honest refusal.
\set suite background
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-bg' AS run \gset
SELECT plan(9);
\o /dev/null
SELECT mesh_acquire(:'run', :'agent', 'conformance');
\o

-- poll a command's stored output until it matches, for at most 30 s
CREATE FUNCTION pg_temp.output_until(id bigint, stream text, pattern text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    got text;
BEGIN
    FOR i IN 1 .. 600 LOOP
        SELECT CASE stream WHEN 'stdout' THEN o.stdout ELSE o.stderr END INTO got FROM mesh_exec_output(id) o;
        EXIT WHEN got ~ pattern;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN got;
END
$$;

SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['true'])), 0, 'the run''s workspace is set up');
SELECT pg_temp.has_cap(:'run', 'background') AS can_background \gset
\if :can_background
SELECT mesh_exec_start(:'run', ARRAY['sh', '-c', 'read x; echo "got $x"; echo err >&2; sleep 1000 & sleep 1000; wait'],
                       stdin => convert_to(E'hello\n', 'UTF8')) AS id1 \gset
SELECT is(pg_temp.output_until(:id1, 'stdout', 'got hello'), E'got hello\n',
          'a started command reads its stdin and its output arrives while it runs');
SELECT is(pg_temp.output_until(:id1, 'stderr', 'err'), E'err\n', 'stderr too, apart');
SELECT is(mesh_exec_kill(:id1, 'TERM'), true, 'mesh_exec_kill signals the running command');
SELECT is((SELECT status FROM mesh_exec_wait(:id1, '60 seconds')), 'killed',
          'which ends with its children: the row says killed');
SELECT results_eq(format('SELECT status, exit_code, stdout FROM mesh_exec_wait(mesh_exec_start(%L, %L::text[]))',
                         :'run', ARRAY['sh', '-c', 'echo done; exit 3']),
                  $$VALUES ('ok'::text, 3, E'done\n'::text)$$,
                  'a command that ends by itself: mesh_exec_wait returns mesh_exec''s row');
SELECT is((SELECT status FROM mesh_exec_wait(mesh_exec_start(:'run', ARRAY['sleep', '60'], timeout => '1 second'))),
          'timeout', 'its timeout ends it');
SELECT mesh_exec_start(:'run', ARRAY['sleep', '1000']) AS id2 \gset
\o /dev/null
SELECT mesh_release(:'run');
\o
SELECT is((SELECT status::text FROM mesh.execs WHERE id = :id2), 'killed', 'the release ends a running one');
SELECT is((SELECT stdout FROM mesh_exec_output(:id1)), E'got hello\n', 'and the output outlives the workspace');
\else
SELECT throws_ok(format('SELECT mesh_exec_start(%L, ARRAY[%L])', :'run', 'true'), '0A000', NULL,
                 'a backend without the capability refuses to start a background command');
SELECT skip('backend ' || :'backend' || ' does not declare the background capability', 7);
\o /dev/null
SELECT mesh_release(:'run');
\o
\endif
SELECT * FROM finish();
\endif
