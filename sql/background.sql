-- background: mesh_exec_start, mesh_exec_wait and mesh_exec_kill refuse bad input with an
-- errcode, a message and a hint, before any backend is called (their behaviour with a real
-- daemon: test/e2e/background.t, test/conformance/06-background.sql).
\set ON_ERROR_STOP 0
SELECT run_id, status FROM mesh_acquire('bg-err-run', 'agent-bg', 'actor-bg');

-- mesh_exec_start takes mesh_exec's arguments, checked the same way
SELECT * FROM regress.try($$SELECT mesh_exec_start(NULL, ARRAY['true'])$$);
SELECT * FROM regress.try($$SELECT mesh_exec_start('bg-err-run', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_exec_start('bg-err-run', ARRAY[]::text[])$$);
SELECT * FROM regress.try($$SELECT mesh_exec_start('bg-err-run', ARRAY['true'], timeout => '0 seconds')$$);
SELECT * FROM regress.try($$SELECT mesh_exec_start('no-such-run', ARRAY['true'])$$);

-- an exec id that is not there, or not given
SELECT * FROM regress.try($$SELECT * FROM mesh_exec_wait(NULL)$$);
SELECT * FROM regress.try($$SELECT * FROM mesh_exec_wait(-1)$$);
SELECT * FROM regress.try($$SELECT mesh_exec_kill(-1)$$);
SELECT * FROM regress.try($$SELECT mesh_exec_kill(NULL)$$);

-- signals: names with or without SIG, any case; others refused
SELECT * FROM regress.try($$SELECT mesh_exec_kill(-1, 'sigterm')$$);
SELECT * FROM regress.try($$SELECT mesh_exec_kill(-1, 'STOP')$$);
SELECT * FROM regress.try($$SELECT mesh_exec_kill(-1, NULL)$$);

-- nothing was written: no exec row, no workspace set up
SELECT count(*) AS execs FROM mesh.execs WHERE run_id = 'bg-err-run';
SELECT status FROM mesh.workspaces WHERE run_id = 'bg-err-run';
SELECT mesh_release('bg-err-run');
