-- test/pgtap/exec_output.sql: stored output's model and privileges, and the store and expiry
-- functions the worker and the reaper call, exercised on rows of their own.
BEGIN;
SELECT plan(25);

SELECT has_table('mesh', 'exec_output', 'output is stored in mesh.exec_output');
SELECT col_is_pk('mesh', 'exec_output', ARRAY['exec_id', 'stream', 'start_offset'], 'chunks are keyed by their offset');
SELECT col_type_is('mesh', 'exec_output', 'data', 'bytea', 'chunks are bytes, not text');
SELECT has_index('mesh', 'execs', 'execs_output_kept_idx', 'the reaper finds expirable output by index');

-- nobody but the worker stores output; the harness reads it only through its functions and views
SELECT ok(NOT has_table_privilege('mesh_harness', 'mesh.exec_output', 'SELECT'), 'the harness cannot read the table itself');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.exec_output_chunk(bigint, text, bigint, bytea)', 'EXECUTE')
          AND NOT has_function_privilege('mesh_harness', 'mesh.exec_output_counts(bigint, bigint, bigint, bigint, bigint, bigint, text, bigint)', 'EXECUTE'),
          'the harness cannot store output');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.exec_output_expire(integer, integer)', 'EXECUTE'),
          'the harness cannot expire output');
SELECT ok(NOT has_function_privilege('public', 'mesh_exec_output(bigint, bigint, bigint, bigint)', 'EXECUTE'),
          'PUBLIC cannot call mesh_exec_output');
SELECT ok(has_function_privilege('mesh_harness', 'mesh_exec_output(bigint, bigint, bigint, bigint)', 'EXECUTE')
          AND has_function_privilege('mesh_harness', 'mesh_exec_output_bytes(bigint, text, bigint, bigint)', 'EXECUTE'),
          'the harness reads output through mesh_exec_output and mesh_exec_output_bytes');
SELECT ok(has_function_privilege('mesh_worker', 'mesh.exec_output_chunk(bigint, text, bigint, bytea)', 'EXECUTE')
          AND has_function_privilege('mesh_worker', 'mesh.exec_output_counts(bigint, bigint, bigint, bigint, bigint, bigint, text, bigint)', 'EXECUTE')
          AND has_function_privilege('mesh_worker', 'mesh.exec_output_expire(integer, integer)', 'EXECUTE')
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
SELECT mesh.exec_output_counts(currval('mesh.execs_id_seq'), 2621540, 100, 2, 0, 2621442, NULL, 0);
UPDATE mesh.execs SET stdout = 'clamped copy' WHERE id = currval('mesh.execs_id_seq');
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
-- the run's quota counts what its commands stored; the install's what the table takes on disk
SELECT is((SELECT output_bytes FROM mesh.workspaces WHERE run_id = 'tap-output'), 2621442::bigint,
          'the run''s stored bytes are counted on its workspace');
SELECT results_eq(format('SELECT allowed, reason FROM mesh.exec_output_allowance(%s, 3000000, 1000000000000)',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (378558::bigint, 'run quota')$$, 'what is left of the run''s quota is what it may store');
SELECT results_eq(format('SELECT allowed, reason FROM mesh.exec_output_allowance(%s, 1000000000000, 8192)',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (0::bigint, 'install quota')$$, 'an install quota smaller than the table allows nothing');
-- a stop is marked once, with one event; from then on nothing more is allowed
SELECT ok(mesh.exec_output_account(currval('mesh.execs_id_seq'), 0, 'run quota', 500), 'the first stop is new');
SELECT ok(NOT mesh.exec_output_account(currval('mesh.execs_id_seq'), 0, 'install quota', 700), 'a second one is not');
SELECT results_eq(format('SELECT output_stopped, output_unstored, (SELECT count(*) FROM mesh.events v WHERE v.kind = ''output_truncated'' AND (v.detail->>''exec_id'')::bigint = %1$s) FROM mesh.execs WHERE id = %1$s',
                         currval('mesh.execs_id_seq')),
                  $$VALUES ('run quota'::text, 1200::bigint, 1::bigint)$$,
                  'the row keeps the first reason and counts every unstored byte; one output_truncated event');
SELECT results_eq(format('SELECT allowed, reason FROM mesh.exec_output_allowance(%s, 1000000000000, 1000000000000)',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (0::bigint, 'run quota')$$, 'a stopped exec stores nothing more');
SELECT throws_ok(format('UPDATE mesh.execs SET output_stopped = ''bogus'' WHERE id = %s', currval('mesh.execs_id_seq')),
                 '23514', NULL, 'a stop has one of the known reasons');
-- expiry: younger than the retention stays, older goes
SELECT is(mesh.exec_output_expire(180, 1000), 0::bigint, 'output within its retention stays');
SELECT ok(mesh.exec_output_expire(60, 1000) >= 1, 'output past its retention goes');
SELECT results_eq(format('SELECT (SELECT count(*) FROM mesh.exec_output WHERE exec_id = %1$s), stdout_dropped = stdout_bytes AND stderr_dropped = stderr_bytes, stdout IS NULL FROM mesh.execs WHERE id = %1$s',
                         currval('mesh.execs_id_seq')),
                  $$VALUES (0::bigint, true, true)$$, 'its chunks and the row''s clamped copy are deleted and the row says all was dropped');

SELECT * FROM finish();
ROLLBACK;
