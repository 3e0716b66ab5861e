-- api_errors: every bad input gets an errcode, a message and a hint, and loses nothing.
\set ON_ERROR_STOP 0
SELECT run_id, status FROM mesh_acquire('err-run', 'agent-e', 'actor-e');

-- missing or empty identifiers
SELECT * FROM regress.try($$SELECT mesh_acquire(NULL, 'a', 'b')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('', 'a', 'b')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', NULL, 'b')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', 'a', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('self', 'a', 'b', 'self')$$);
-- a conflicting redeclaration
SELECT * FROM regress.try($$SELECT mesh_acquire('err-run', 'agent-other', 'actor-e')$$);

-- unknown run
SELECT * FROM regress.try($$SELECT mesh_exec('no-such-run', ARRAY['true'])$$);
SELECT * FROM regress.try($$SELECT mesh_read_file('no-such-run', 'x')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('no-such-run', 'x', 'y')$$);
SELECT * FROM regress.try($$SELECT mesh_release('no-such-run')$$);

-- bad argv
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY[]::text[])$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['echo', NULL])$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY[''::text])$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY[['a','b'],['c','d']])$$);
-- bad timeout, env, paths, mode, content
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['true'], timeout => '-1 second')$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['true'], env => '[1,2]')$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['true'], env => '{"A=B": "x"}')$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['true'], env => '{"A": 1}')$$);
SELECT * FROM regress.try($$SELECT mesh_exec('err-run', ARRAY['true'], dir => '../..')$$);
SELECT * FROM regress.try($$SELECT mesh_read_file('err-run', '../etc/passwd')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('err-run', 'a/../../x', 'y')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('err-run', 'x', 'y', -1)$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('err-run', 'x', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_read_file('err-run', '')$$);

-- none of the above touched a backend: the run is still only declared
SELECT run_id, status, backend_kind FROM mesh.workspaces WHERE run_id = 'err-run';
SELECT count(*) AS execs FROM mesh.execs WHERE run_id = 'err-run';
SELECT mesh_release('err-run');
