-- test/pgtap/exec_output.sql: stored output's model and privileges, and the store and expiry
-- functions the worker and the reaper call, exercised on rows of their own.
BEGIN;
SELECT plan(17);

SELECT has_table('mesh', 'exec_output', 'output is stored in mesh.exec_output');
SELECT col_is_pk('mesh', 'exec_output', ARRAY['exec_id', 'stream', 'start_offset'], 'chunks are keyed by their offset');
SELECT col_type_is('mesh', 'exec_output', 'data', 'bytea', 'chunks are bytes, not text');
SELECT has_index('mesh', 'execs', 'execs_output_kept_idx', 'the reaper finds expirable output by index');

-- nobody but the worker stores output; the harness reads it only through its functions and views
SELECT ok(NOT has_table_privilege('mesh_harness', 'mesh.exec_output', 'SELECT'), 'the harness cannot read the table itself');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.exec_output_chunk(bigint, text, bigint, bytea)', 'EXECUTE')
          AND NOT has_function_privilege('mesh_harness', 'mesh.exec_output_counts(bigint, bigint, bigint, bigint, bigint)', 'EXECUTE'),
          'the harness cannot store output');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.exec_output_expire(integer)', 'EXECUTE'),
          'the harness cannot expire output');
SELECT ok(NOT has_function_privilege('public', 'mesh_exec_output(bigint, bigint, bigint, bigint)', 'EXECUTE'),
          'PUBLIC cannot call mesh_exec_output');
SELECT ok(has_function_privilege('mesh_harness', 'mesh_exec_output(bigint, bigint, bigint, bigint)', 'EXECUTE')
          AND has_function_privilege('mesh_harness', 'mesh_exec_output_bytes(bigint, text, bigint, bigint)', 'EXECUTE'),
          'the harness reads output through mesh_exec_output and mesh_exec_output_bytes');
SELECT ok(has_function_privilege('mesh_worker', 'mesh.exec_output_chunk(bigint, text, bigint, bytea)', 'EXECUTE')
          AND has_function_privilege('mesh_worker', 'mesh.exec_output_counts(bigint, bigint, bigint, bigint, bigint)', 'EXECUTE')
          AND has_function_privilege('mesh_worker', 'mesh.exec_output_expire(integer)', 'EXECUTE')
          AND NOT has_table_privilege('mesh_worker', 'mesh.exec_output', 'DELETE'),
          'the worker stores output and the reaper expires it, with no DELETE of its own');

-- a finished exec of a workspace of its own, and 2.5 MB of stdout after 100 dropped bytes,
-- stored the way the worker does: chunk by chunk, then the row's counts
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status)
VALUES ('tap-output', 'tap-agent', 'tap', 'released');
INSERT INTO mesh.execs (workspace_id, run_id, argv, timeout_ms, status, finished_at)
SELECT id, run_id, ARRAY['tap'], 1000, 'ok', now() - interval '2 hours' FROM mesh.workspaces WHERE run_id = 'tap-output';
SELECT mesh.exec_output_chunk(currval('mesh.execs_id_seq'), 'stdout', 100 + i * 1048576,
                              substring(convert_to(repeat('0123456789', 262144), 'UTF8') FROM i * 1048576 + 1 FOR 1048576))
  FROM generate_series(0, 2) i;
SELECT mesh.exec_output_chunk(currval('mesh.execs_id_seq'), 'stderr', 0, '\x00ff'::bytea);
SELECT mesh.exec_output_counts(currval('mesh.execs_id_seq'), 2621540, 100, 2, 0);
SELECT results_eq(format('SELECT start_offset, length(data) FROM mesh.exec_output WHERE exec_id = %s AND stream = ''stdout'' ORDER BY 1',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (100::bigint, 1048576), (1048676, 1048576), (2097252, 524288)$$,
                  'chunks are keyed by their offset in the stream, from the first kept byte');
SELECT results_eq(format('SELECT stdout_bytes, stdout_dropped, stderr_bytes, stderr_dropped FROM mesh.execs WHERE id = %s',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (2621540::bigint, 100::bigint, 2::bigint, 0::bigint)$$, 'the row counts kept and dropped bytes');
SELECT is((SELECT stdout FROM mesh_exec_output(currval('mesh.execs_id_seq'), 0, 0, 1000000000)),
          repeat('0123456789', 262144), 'read back whole, the chunks are contiguous');
SELECT is((SELECT data FROM mesh_exec_output_bytes(currval('mesh.execs_id_seq'), 'stdout', 1048670, 12)),
          convert_to('012345678901', 'UTF8'), 'a read across a chunk boundary is contiguous');
-- expiry: younger than the retention stays, older goes
SELECT is(mesh.exec_output_expire(180), 0::bigint, 'output within its retention stays');
SELECT ok(mesh.exec_output_expire(60) >= 1, 'output past its retention goes');
SELECT results_eq(format('SELECT (SELECT count(*) FROM mesh.exec_output WHERE exec_id = %1$s), stdout_dropped = stdout_bytes AND stderr_dropped = stderr_bytes FROM mesh.execs WHERE id = %1$s',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (0::bigint, true)$$, 'its chunks are deleted and the row says all was dropped');

SELECT * FROM finish();
ROLLBACK;
