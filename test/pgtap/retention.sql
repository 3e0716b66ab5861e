-- test/pgtap/retention.sql: bounded history.  mesh.history_expire deletes what is past its
-- retention (finished execs with their output, events, settled workspaces) and nothing of a
-- live workspace or a running exec, folds what it deletes into mesh.usage_daily (whose sums
-- equal the deleted rows'), keeps everything at 0, and only the reaper and the admin call it.
BEGIN;
SELECT plan(32);

SELECT has_table('mesh', 'usage_daily', 'expired history leaves its totals in mesh.usage_daily');
SELECT has_index('mesh', 'execs', 'execs_finished_idx', 'the oldest finished execs are found by index');
SELECT has_index('mesh', 'events', 'events_at_idx', 'the oldest events are found by index');
SELECT has_index('mesh', 'workspaces', 'workspaces_settled_idx', 'the oldest settled workspaces are found by index');

-- who may call it
SELECT ok(NOT has_function_privilege('public', 'mesh.history_expire(interval, interval, interval, interval, integer)', 'EXECUTE'),
          'PUBLIC cannot expire history');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.history_expire(interval, interval, interval, interval, integer)', 'EXECUTE'),
          'the harness cannot expire history');
SELECT ok(has_function_privilege('mesh_worker', 'mesh.history_expire(interval, interval, interval, interval, integer)', 'EXECUTE')
          AND has_function_privilege('mesh_admin', 'mesh.history_expire(interval, interval, interval, interval, integer)', 'EXECUTE')
          AND NOT has_table_privilege('mesh_worker', 'mesh.execs', 'DELETE'),
          'the reaper and the admin expire history, with no DELETE of their own');
SELECT ok(has_table_privilege('mesh_admin', 'mesh.usage_daily', 'SELECT')
          AND NOT has_table_privilege('mesh_harness', 'mesh.usage_daily', 'SELECT'),
          'the admin reads the rollup, the harness does not');
SET LOCAL ROLE mesh_harness;
SELECT throws_ok('SELECT mesh.history_expire()', '42501', NULL, 'a harness call is refused');
RESET ROLE;

-- the settings: 14 days by default, read as SHOW gives them; 0 keeps
SELECT is(current_setting('mesh.exec_retention') || ' ' || current_setting('mesh.event_retention') || ' '
          || current_setting('mesh.workspace_retention'), '14d 14d 14d', 'each retention is 14 days by default');
SELECT is(mesh.retention_interval('14d'), interval '14 days', 'a setting''s value reads as an interval');
SELECT is(mesh.retention_interval('0'), NULL, 'a setting of 0 means keep');

-- runs of agent tap-ret (all in the past: now() is this transaction's start)
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref,
                             release_outcome, status_reason_code, compute_seconds, created_at, released_at)
VALUES ('tap-ret-old', 'tap-ret', 'tap', 'released', 'local', 'ref-old', 'destroyed', NULL, 7.5,
        now() - interval '31 days', now() - interval '30 days'),
       ('tap-ret-budget', 'tap-ret', 'tap', 'failed', NULL, NULL, NULL, 'budget_exhausted', 2.25,
        now() - interval '31 days', NULL),
       ('tap-ret-live', 'tap-ret', 'tap', 'ready', 'local', 'ref-live', NULL, NULL, 1,
        now() - interval '30 days', NULL),
       ('tap-ret-recent', 'tap-ret', 'tap', 'released', 'local', 'ref-recent', 'destroyed', NULL, 1,
        now() - interval '2 days', now() - interval '1 day'),
       ('tap-ret-stuck', 'tap-ret', 'tap', 'released', 'local', 'ref-stuck', 'must be released by hand', NULL, 0.5,
        now() - interval '31 days', now() - interval '30 days'),
       ('tap-ret-running', 'tap-ret', 'tap', 'released', 'local', 'ref-running', 'destroyed', NULL, 0,
        now() - interval '31 days', now() - interval '30 days');
INSERT INTO mesh.execs (workspace_id, run_id, argv, timeout_ms, status, started_at, finished_at,
                        cpu_seconds, wall_seconds, charged_seconds, charge_basis, stdout_bytes, stderr_bytes, stdout)
SELECT w.id, w.run_id, ARRAY['tap', x.n::text], 1000, x.status::mesh.exec_status, x.started, x.finished,
       x.cpu, x.wall, x.charged, x.basis, x.outb, x.errb, 'kept copy'
  FROM (VALUES ('tap-ret-old', 1, 'ok', now() - interval '30 days 1 hour', now() - interval '30 days', 1.5, 2.0, 1.5, 'cpu', 100, 5),
               ('tap-ret-old', 2, 'ok', now() - interval '30 days 1 hour', now() - interval '30 days', 2.0, 3.0, 2.0, 'cpu', 200, 0),
               ('tap-ret-old', 3, 'timeout', now() - interval '30 days 1 hour', now() - interval '30 days', 0.25, 4.0, 4.0, 'wall', 0, 7),
               ('tap-ret-stuck', 4, 'ok', now() - interval '30 days 1 hour', now() - interval '30 days', 0.5, 0.5, 0.5, 'cpu', 10, 0),
               ('tap-ret-live', 5, 'ok', now() - interval '30 days 1 hour', now() - interval '30 days', 1, 1, 1, 'cpu', 1, 1),
               ('tap-ret-recent', 6, 'ok', now() - interval '1 day 1 hour', now() - interval '1 day', 1, 1, 1, 'cpu', 1, 1),
               ('tap-ret-running', 7, 'running', now() - interval '30 days', NULL, NULL, NULL, NULL, NULL, 0, 0))
       x (run_id, n, status, started, finished, cpu, wall, charged, basis, outb, errb)
  JOIN mesh.workspaces w ON w.run_id = x.run_id;
INSERT INTO mesh.exec_output (exec_id, stream, start_offset, data)
SELECT e.id, 'stdout', 0, '\x6869'::bytea FROM mesh.execs e WHERE e.run_id LIKE 'tap-ret-%';
INSERT INTO mesh.events (at, kind, run_id, workspace_id, detail)
SELECT now() - x.age, 'tap_retention', w.run_id, w.id, jsonb_build_object('tag', x.tag)
  FROM (VALUES ('tap-ret-old', interval '30 days', 'old'), ('tap-ret-live', interval '30 days', 'live'),
               ('tap-ret-recent', interval '1 day', 'recent')) x (run_id, age, tag)
  JOIN mesh.workspaces w ON w.run_id = x.run_id;
INSERT INTO mesh.events (at, kind, detail) VALUES (now() - interval '30 days', 'tap_retention', '{"tag": "no run"}');
INSERT INTO mesh.grants (run_id, kind, name) VALUES ('tap-ret-old', 'registry', 'npm'), ('tap-ret-live', 'registry', 'npm');
INSERT INTO mesh.run_tokens (run_id, token_sha256, expires_at)
VALUES ('tap-ret-old', '\x7461702d7265742d6f6c64', now() - interval '29 days');

-- what is to go: the finished execs of settled runs, and the settled runs with no sandbox left
CREATE TEMP TABLE gone_execs AS
SELECT count(*) AS execs, sum(cpu_seconds) AS cpu, sum(wall_seconds) AS wall,
       sum(charged_seconds) FILTER (WHERE charge_basis = 'cpu') AS cpu_charged,
       sum(charged_seconds) FILTER (WHERE charge_basis = 'wall') AS wall_charged,
       sum(stdout_bytes + stderr_bytes) AS bytes
  FROM mesh.execs WHERE run_id IN ('tap-ret-old', 'tap-ret-stuck');
CREATE TEMP TABLE spend_before AS SELECT * FROM mesh.spend_by_agent WHERE agent_id = 'tap-ret';

-- 0 keeps everything
SELECT results_eq($$SELECT * FROM mesh.history_expire('0', '0', '0', '0', 100000)$$,
                  $$VALUES (0::bigint, 0::bigint, 0::bigint, 0::bigint)$$, 'retentions of 0 delete nothing');
SELECT is((SELECT count(*) FROM mesh.execs WHERE run_id LIKE 'tap-ret-%'), 7::bigint, 'every exec is kept');

-- one batch of one deletes at most one row of each kind
SELECT ok((SELECT greatest(outputs, execs, events, workspaces) = 1
             FROM mesh.history_expire('14 days', '14 days', '14 days', '7 days', 1)),
          'a batch is bounded: at most p_batch rows of each kind');
-- the rest, with the settings' own retentions (14 days; output 7)
SELECT ok((SELECT execs >= 3 AND events >= 1 AND workspaces >= 1 FROM mesh.history_expire(p_batch => 100000)),
          'with the settings, the rest of what is past its retention goes');

SELECT is((SELECT array_agg(argv[2] ORDER BY argv[2]) FROM mesh.execs WHERE run_id LIKE 'tap-ret-%'),
          ARRAY['5', '6', '7'], 'finished execs of settled runs past retention go; a live run''s, recent ones and running ones stay');
SELECT is((SELECT count(*) FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id WHERE e.run_id LIKE 'tap-ret-%'),
          2::bigint, 'the deleted execs'' output went with them; a recent and a running one''s output stays');
SELECT is((SELECT count(*) FROM mesh.exec_output o WHERE NOT EXISTS (SELECT 1 FROM mesh.execs e WHERE e.id = o.exec_id)),
          0::bigint, 'no output is left without its exec');
SELECT is((SELECT stdout FROM mesh.execs WHERE run_id = 'tap-ret-live'), NULL,
          'a live run''s old exec keeps its row but its output expires (mesh.exec_output_retention)');
SELECT is((SELECT array_agg(run_id ORDER BY run_id) FROM mesh.workspaces WHERE agent_id = 'tap-ret'),
          ARRAY['tap-ret-live', 'tap-ret-recent', 'tap-ret-running', 'tap-ret-stuck'],
          'settled runs with nothing left go; live, recent, still-running and never-released ones stay');
SELECT is((SELECT array_agg(detail->>'tag' ORDER BY detail->>'tag') FROM mesh.events WHERE kind = 'tap_retention'),
          ARRAY['live', 'recent'], 'old events go, except a live workspace''s; recent ones stay');
SELECT is((SELECT count(*) FROM mesh.grants WHERE run_id = 'tap-ret-old')
          + (SELECT count(*) FROM mesh.run_tokens WHERE run_id = 'tap-ret-old'), 0::bigint,
          'a deleted run''s grants and tokens go with it');
SELECT is((SELECT count(*) FROM mesh.grants WHERE run_id = 'tap-ret-live'), 1::bigint, 'a live run''s grants stay');

-- the rollup holds exactly what went
SELECT results_eq($$SELECT sum(execs)::bigint, sum(cpu_seconds), sum(wall_seconds), sum(cpu_charged_seconds),
                           sum(wall_charged_seconds), sum(output_bytes)::bigint
                      FROM mesh.usage_daily WHERE agent_id = 'tap-ret'$$,
                  $$SELECT execs, cpu, wall, cpu_charged, wall_charged, bytes::bigint FROM gone_execs$$,
                  'the rollup''s exec sums equal the deleted execs''');
SELECT results_eq($$SELECT sum(runs)::bigint, sum(runs_stopped_by_budget)::bigint, sum(compute_seconds)
                      FROM mesh.usage_daily WHERE agent_id = 'tap-ret'$$,
                  $$VALUES (2::bigint, 1::bigint, 9.75::double precision)$$,
                  'the rollup''s run sums equal the deleted runs''');
SELECT results_eq($$SELECT day, backend FROM mesh.usage_daily WHERE agent_id = 'tap-ret' AND runs > 0 ORDER BY backend$$,
                  $$VALUES (((now() - interval '31 days') AT TIME ZONE 'UTC')::date, ''), (((now() - interval '31 days') AT TIME ZONE 'UTC')::date, 'local')$$,
                  'runs are rolled up by the day they were declared and their backend ('''' for none)');
SELECT results_eq($$SELECT * FROM mesh.spend_by_agent WHERE agent_id = 'tap-ret'$$,
                  $$SELECT * FROM spend_before$$, 'spend by agent is the same after expiry');

-- again: nothing more of these goes, and the rollup does not count twice
SELECT lives_ok($$SELECT mesh.history_expire(p_batch => 100000)$$, 'a second call runs');
SELECT is((SELECT count(*) FROM mesh.execs WHERE run_id LIKE 'tap-ret-%')
          + (SELECT count(*) FROM mesh.workspaces WHERE agent_id = 'tap-ret'), 7::bigint,
          'it deletes none of the rows that stay');
SELECT is((SELECT sum(execs)::bigint FROM mesh.usage_daily WHERE agent_id = 'tap-ret'), 4::bigint,
          'the rollup counts each deleted exec once');
SELECT throws_ok($$SELECT mesh.history_expire(p_batch => 0)$$, '22023', NULL, 'a batch must hold a row');

SELECT * FROM finish();
ROLLBACK;
