-- test/pgtap/stat_views.sql: the statistics views a monitoring stack scrapes.  After a
-- mesh.stat_reset() the counters of mesh.stat_backends and mesh.stat_workers start from zero
-- and stats_reset moves; calls of the backend the suite uses (the embedded one) are counted
-- per operation, failed calls as errors, with latency percentiles in order; mesh.stat_agents
-- counts an agent's runs and commands from the tables; mesh_admin and pg_monitor read them,
-- only mesh_admin resets, PUBLIC and harness roles get nothing.  The worker commits the rows
-- these calls make, so the file releases its run.
SELECT plan(39);

SELECT has_view('mesh', 'stat_backends', 'mesh.stat_backends exists');
SELECT has_view('mesh', 'stat_backend_latency', 'mesh.stat_backend_latency exists');
SELECT has_view('mesh', 'stat_workers', 'mesh.stat_workers exists');
SELECT has_view('mesh', 'stat_agents', 'mesh.stat_agents exists');
SELECT has_function('mesh', 'stat_reset', ARRAY[]::text[], 'mesh.stat_reset() exists');
SELECT columns_are('mesh', 'stat_backends',
                   ARRAY['backend', 'operation', 'calls', 'errors', 'total_time', 'mean_time',
                         'p50_time', 'p95_time', 'p99_time', 'stats_reset'],
                   'mesh.stat_backends has pg_stat_* style columns');
SELECT columns_are('mesh', 'stat_workers',
                   ARRAY['worker', 'pid', 'queue_depth', 'calls_in_flight', 'busy_time', 'calls',
                         'wal_flushes', 'last_activity', 'stats_reset'],
                   'mesh.stat_workers has its columns');

-- privileges: read by mesh_admin and pg_monitor, reset by mesh_admin only, nothing for others
SELECT ok(bool_and(has_table_privilege('mesh_admin', v, 'SELECT') AND has_table_privilege('pg_monitor', v, 'SELECT')),
          'mesh_admin and pg_monitor may read the four views')
  FROM unnest(ARRAY['mesh.stat_backends', 'mesh.stat_backend_latency', 'mesh.stat_workers', 'mesh.stat_agents']) v;
SELECT ok(NOT bool_or(has_table_privilege('mesh_harness', v, 'SELECT') OR has_table_privilege('public', v, 'SELECT')),
          'neither a harness role nor PUBLIC may read them')
  FROM unnest(ARRAY['mesh.stat_backends', 'mesh.stat_backend_latency', 'mesh.stat_workers', 'mesh.stat_agents']) v;
SELECT ok(has_function_privilege('mesh_admin', 'mesh.stat_reset()', 'EXECUTE')
          AND NOT has_function_privilege('pg_monitor', 'mesh.stat_reset()', 'EXECUTE')
          AND NOT has_function_privilege('mesh_harness', 'mesh.stat_reset()', 'EXECUTE')
          AND NOT has_function_privilege('public', 'mesh.stat_reset()', 'EXECUTE'),
          'only mesh_admin may reset the counters');
SET ROLE pg_monitor;
SELECT lives_ok('SELECT count(*) FROM mesh.stat_backends, mesh.stat_workers',
                'a pg_monitor member reads the counters');
SELECT lives_ok('SELECT count(*) FROM mesh.stat_agents', 'a pg_monitor member reads the agents view');
SELECT throws_ok('SELECT mesh.stat_reset()', '42501', NULL, 'a pg_monitor member cannot reset them');
RESET ROLE;
SET ROLE mesh_harness;
SELECT throws_ok('SELECT count(*) FROM mesh.stat_backends', '42501', NULL, 'a harness role cannot read them');
RESET ROLE;

-- a reset zeroes the counters and stamps stats_reset
SELECT 'pgtap-stat-' || pg_backend_pid() || '-' || txid_current() AS run,
       'pgtap-stat-agent-' || pg_backend_pid() || '-' || txid_current() AS agent,
       clock_timestamp() AS before_reset \gset
SELECT mesh.stat_reset();
SELECT is((SELECT count(*) FROM mesh.stat_backends WHERE calls <> 0 OR errors <> 0 OR total_time <> 0), 0::bigint,
          'after a reset every backend counter is zero');
SELECT is((SELECT count(*) FROM mesh.stat_backends WHERE p50_time IS NOT NULL OR mean_time IS NOT NULL), 0::bigint,
          '... and no row has a mean or a percentile without calls');
SELECT ok((SELECT bool_and(stats_reset >= :'before_reset'::timestamptz) FROM mesh.stat_workers),
          'the reset is stamped in stats_reset');
SELECT is((SELECT count(DISTINCT stats_reset) FROM (SELECT stats_reset FROM mesh.stat_workers
                                                    UNION ALL SELECT stats_reset FROM mesh.stat_backends) s),
          1::bigint, 'both views count from the same reset');
SELECT is((SELECT sum(calls) FROM mesh.stat_workers), 0::numeric, 'the workers'' call counts are zero');
SELECT ok((SELECT bool_and(pid IS NOT NULL) AND count(*) >= 1 FROM mesh.stat_workers),
          'every worker is listed, running, with its pid');

-- calls of the suite's backend: a declaration, two commands, a refused read, an unknown run
SELECT is((SELECT status::text FROM mesh_acquire(:'run', :'agent', 'pgtap')), 'pending', 'a run is declared');
SELECT is((SELECT exit_code FROM mesh_exec(:'run', ARRAY['true'])), 0, 'a command runs');
SELECT is((SELECT exit_code FROM mesh_exec(:'run', ARRAY['sh', '-c', 'exit 3'])), 3,
          'a command that exits non-zero is still an answered call');
SELECT throws_ok(format('SELECT mesh_read_file(%L, %L)', :'run', '/etc/passwd'), '42501', NULL,
                 'a read outside the workspace fails on the backend');
SELECT throws_like(format('SELECT mesh_exec(%L, ARRAY[%L])', :'run' || '-never-declared', 'true'),
                   '%has no workspace declared%', 'a command for an undeclared run fails before any backend');
SELECT backend_kind AS backend FROM mesh.workspaces WHERE run_id = :'run' \gset

SELECT is((SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend = :'backend' AND operation = 'exec'),
          '2/0', 'both commands are counted for the run''s backend, without errors');
SELECT is((SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend = :'backend' AND operation = 'read_file'),
          '1/1', 'the refused read is counted as a call that failed');
SELECT is((SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend IS NULL AND operation = 'exec'),
          '1/1', 'the undeclared run''s command failed before reaching a backend (backend NULL)');
SELECT is((SELECT calls || '/' || errors FROM mesh.stat_backends WHERE backend IS NULL AND operation = 'acquire'),
          '1/0', 'a declaration reaches no backend');
SELECT ok((SELECT total_time > 0 AND abs(mean_time * calls - total_time) < 1e-6 * total_time
                  AND p50_time > 0 AND p50_time <= p95_time AND p95_time <= p99_time
             FROM mesh.stat_backends WHERE backend = :'backend' AND operation = 'exec'),
          'the commands took time: the mean is total/calls, 0 < p50 <= p95 <= p99');
-- the histogram Prometheus reads holds the same calls: cumulative counts under rising bounds
SELECT is((SELECT l.calls || '/' || round((l.sum_seconds * 1000)::numeric, 3)
             FROM mesh.stat_backend_latency l WHERE l.backend = :'backend' AND l.operation = 'exec'),
          (SELECT b.calls || '/' || round(b.total_time::numeric, 3)
             FROM mesh.stat_backends b WHERE b.backend = :'backend' AND b.operation = 'exec'),
          'the latency histogram counts the same commands and time as mesh.stat_backends');
SELECT ok((SELECT le = (SELECT array_agg(x ORDER BY x) FROM unnest(le) x)
                  AND calls_below = (SELECT array_agg(c ORDER BY c) FROM unnest(calls_below) c)
                  AND calls_below[array_length(calls_below, 1)] <= calls AND calls_below[1] = 0
             FROM mesh.stat_backend_latency WHERE backend = :'backend' AND operation = 'exec'),
          'its bounds rise and the calls below them never fall, up to the count');
SELECT ok((SELECT sum(calls) FROM mesh.stat_workers) >= 5
          AND (SELECT bool_or(busy_time > 0 AND last_activity >= :'before_reset'::timestamptz) FROM mesh.stat_workers),
          'the workers counted the calls they ended, their busy time and last activity');
SELECT ok((SELECT bool_and(queue_depth >= 0 AND calls_in_flight >= 0) FROM mesh.stat_workers),
          'queue depth and calls in flight are gauges, never negative');

SELECT is((SELECT runs || '/' || live_workspaces || '/' || execs FROM mesh.stat_agents WHERE agent_id = :'agent'),
          '1/1/2', 'the agent has one live run with two commands');
SELECT ok((SELECT cpu_seconds >= 0 AND compute_seconds >= 0 AND runs_stopped_by_budget = 0
             FROM mesh.stat_agents WHERE agent_id = :'agent'),
          'the agent''s CPU seconds and compute charged are counted, no run stopped by its budget');

-- a second reset: zero again, stamped later, the rows stay
SELECT clock_timestamp() AS before_second \gset
SELECT mesh.stat_reset();
SELECT is((SELECT calls || '/' || errors || '/' || total_time FROM mesh.stat_backends
            WHERE backend = :'backend' AND operation = 'exec'),
          '0/0/0', 'a reset zeroes the backend''s counters and keeps its row');
SELECT ok((SELECT bool_and(stats_reset >= :'before_second'::timestamptz) FROM mesh.stat_backends),
          'stats_reset moves with each reset');

SELECT mesh_release(:'run', 'pgtap done') IS NOT NULL AS released;
SELECT is((SELECT live_workspaces FROM mesh.stat_agents WHERE agent_id = :'agent'), 0::bigint,
          'a released run is no longer live');
SELECT * FROM finish();
