-- test/pgtap/call_stages.sql: mesh.call_stages() counts where the time of each answered call
-- went (hand-off, worker transactions, HTTP, reply, total), per operation, and
-- mesh.call_stages_reset() starts afresh; only admins read or reset them.  The worker commits
-- the rows these calls make, so the file cleans up after itself.
SELECT plan(18);

SELECT has_function('mesh', 'call_stages', ARRAY[]::text[], 'mesh.call_stages() exists');
SELECT is(pg_get_function_result('mesh.call_stages()'::regprocedure),
          'TABLE(op text, stage text, calls bigint, total_ms double precision)',
          'mesh.call_stages() returns (op, stage, calls, total_ms)');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.call_stages_reset()', 'EXECUTE')
          AND NOT has_function_privilege('mesh_harness', 'mesh.call_stages()', 'EXECUTE'),
          'a harness role can neither read nor reset the counters');
SELECT ok(has_function_privilege('mesh_admin', 'mesh.call_stages_reset()', 'EXECUTE')
          AND has_function_privilege('mesh_admin', 'mesh.call_stages()', 'EXECUTE'),
          'mesh_admin can read and reset them');

SELECT 'pgtap-stages-' || pg_backend_pid() || '-' || txid_current() AS run \gset
SELECT mesh.call_stages_reset();
SELECT is((SELECT count(*) FROM mesh.call_stages()), 0::bigint, 'after a reset no operation has calls');

-- two declarations: one answered with the row, one with an error; both are answered calls
SELECT is((SELECT status::text FROM mesh_acquire(:'run', 'pgtap-stages', 'pgtap')), 'pending',
          'a run is declared');
SELECT throws_like(format('SELECT mesh_acquire(%L, %L, %L)', :'run', 'pgtap-other', 'pgtap'),
                   '%already declared with a different agent%', 'a conflicting declaration is refused');
SELECT is((SELECT array_agg(stage ORDER BY stage) FROM mesh.call_stages() WHERE op = 'acquire'),
          ARRAY['handoff', 'http', 'reply', 'total', 'worker_txn'],
          'acquire has a row per stage');
SELECT is((SELECT DISTINCT calls FROM mesh.call_stages() WHERE op = 'acquire'), 2::bigint,
          'both declarations are counted, the refused one too');
SELECT ok((SELECT bool_and(total_ms >= 0) AND bool_or(stage = 'total' AND total_ms > 0)
             FROM mesh.call_stages() WHERE op = 'acquire'),
          'the declarations took time');
SELECT is((SELECT total_ms FROM mesh.call_stages() WHERE op = 'acquire' AND stage = 'http'), 0::float8,
          'declaring calls no backend: no HTTP time');
SELECT ok((SELECT total_ms FROM mesh.call_stages() WHERE op = 'acquire' AND stage = 'worker_txn') > 0,
          'declaring is a worker transaction');
-- hand-off, the worker's transactions and the reply happen one after the other inside the wait
SELECT ok((SELECT sum(total_ms) FILTER (WHERE stage IN ('handoff', 'worker_txn', 'reply'))
                  <= sum(total_ms) FILTER (WHERE stage = 'total')
             FROM mesh.call_stages() WHERE op = 'acquire'),
          'the stages of a declaration fit in its total');

SELECT is((SELECT exit_code FROM mesh_exec(:'run', ARRAY['true'])), 0, 'a command runs');
SELECT is((SELECT calls FROM mesh.call_stages() WHERE op = 'exec' AND stage = 'total'), 1::bigint,
          'the exec is counted once');
SELECT ok((SELECT total_ms FROM mesh.call_stages() WHERE op = 'exec' AND stage = 'http') > 0,
          'an exec spends time in HTTP (the backend ran the command)');
-- its hand-off, transactions, HTTP (the driver run) and reply are disjoint parts of its wait
SELECT ok((SELECT sum(total_ms) FILTER (WHERE stage <> 'total')
                  <= sum(total_ms) FILTER (WHERE stage = 'total')
             FROM mesh.call_stages() WHERE op = 'exec'),
          'the stages of an exec fit in its total');

SELECT mesh.call_stages_reset();
SELECT is((SELECT count(*) FROM mesh.call_stages() WHERE op IN ('acquire', 'exec')), 0::bigint,
          'a reset clears the counts');

SELECT mesh_release(:'run', 'pgtap done') IS NOT NULL AS released;
SELECT * FROM finish();
