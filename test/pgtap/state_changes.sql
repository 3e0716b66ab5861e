-- test/pgtap/state_changes.sql: the workers' state-change functions (mesh.workspace_*,
-- mesh.exec_*, mesh.fail_lost_execs): each move they allow, each move they refuse, the
-- sentences rendered from reason codes, and that only mesh_worker may call them.
-- Rows are made by hand in a transaction that is rolled back: no backend is called.
BEGIN;
SELECT plan(89);

-- Only the workers call them.
SELECT ok(NOT has_function_privilege(r, f, 'EXECUTE'), r || ' cannot call ' || f)
  FROM unnest(ARRAY['public', 'mesh_harness', 'mesh_admin']) r,
       unnest(ARRAY['mesh.workspace_begin_acquire(bigint, text, text, mesh.size_tier, jsonb, boolean)',
                    'mesh.workspace_released(bigint, text, text)',
                    'mesh.exec_finish(bigint, mesh.exec_status, integer, text, text, boolean, double precision, double precision, double precision, text, text, bigint, jsonb, bigint)',
                    'mesh.fail_lost_execs(text, integer, integer)']) f;
SELECT ok(has_function_privilege('mesh_worker', 'mesh.workspace_declare(text, text, text, text, text, oid, text, bigint)', 'EXECUTE'),
          'mesh_worker calls the state-change functions');

-- The codes are what the workers' C enums mirror, in order (src/store.h).
SELECT enum_has_labels('mesh', 'status_reason_code',
    ARRAY['acquire_interrupted', 'acquire_failed', 'hibernated_idle', 'hibernated_by_backend',
          'found_running', 'lost', 'budget_exhausted', 'release_stuck']);

CREATE TEMP TABLE ids (name text PRIMARY KEY, id bigint);
CREATE FUNCTION pg_temp.ws(n text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE name = n $$;
CREATE FUNCTION pg_temp.row_of(n text) RETURNS mesh.workspaces LANGUAGE sql AS
$$ SELECT w FROM mesh.workspaces w WHERE w.id = pg_temp.ws(n) $$;
-- a workspace in a given status, on the embedded backend
CREATE FUNCTION pg_temp.make(n text, st mesh.workspace_status, ref text DEFAULT 'ref-x') RETURNS bigint
LANGUAGE sql AS $$
    WITH w AS (INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref, size)
               VALUES ('st-' || n, 'st-agent-' || n, 'st-actor', st, 'local',
                       CASE WHEN ref IS NULL THEN NULL ELSE ref || '-' || n END, 'standard') RETURNING id)
    INSERT INTO ids SELECT n, id FROM w RETURNING id
$$;

-- Declaring: intent, idempotent, refused when it differs.
INSERT INTO ids SELECT 'decl', (mesh.workspace_declare('st-decl', 'st-agent', 'st-actor', NULL, NULL, NULL)).id;
SELECT is((pg_temp.row_of('decl')).status, 'pending', 'a declared run is pending');
SELECT is((mesh.workspace_declare('st-decl', 'st-agent', 'st-actor', NULL, NULL, NULL)).id, pg_temp.ws('decl'),
          'declaring again with the same particulars returns the same row');
SELECT throws_ok($$SELECT mesh.workspace_declare('st-decl', 'other-agent', 'st-actor', NULL, NULL, NULL)$$,
                 '23505', 'run "st-decl" is already declared with a different agent, actor, parent, environment, project or snapshot',
                 'declaring it differently is refused');
SELECT throws_ok($$SELECT mesh.workspace_declare('st-env', 'st-agent', 'st-actor', NULL, 'no-such-env', NULL)$$,
                 '42704', 'environment "no-such-env" is not declared', 'an undeclared environment is refused');

-- Materializing: choose, then record, then ready.
SELECT is((SELECT backend FROM mesh.workspace_choose_backend(pg_temp.ws('decl'))), 'local',
          'a pending run gets the enabled backend');
SELECT is(mesh.workspace_begin_acquire(pg_temp.ws('decl'), 'local', 'ref-decl', 'standard', '{"egress_control": true}', false)->>'mode',
          'open', 'the move to acquiring returns the network policy it recorded');
SELECT is((pg_temp.row_of('decl')).status, 'acquiring', 'pending -> acquiring');
SELECT is((SELECT count(*)::int FROM mesh.events WHERE run_id = 'st-decl' AND kind = 'acquiring'), 1,
          'the move to acquiring is an event');
SELECT throws_ok($$SELECT * FROM mesh.workspace_choose_backend(pg_temp.ws('decl'))$$, '55000', NULL,
                 'an acquiring workspace cannot be materialized again');
SELECT throws_ok($$SELECT mesh.workspace_begin_acquire(pg_temp.ws('decl'), 'local', 'r', 'standard', '{}', false)$$,
                 '55000', 'mesh: the workspace of run "st-decl" is acquiring, it cannot begin an acquisition',
                 'nor begin a second acquisition');
SELECT lives_ok($$SELECT mesh.workspace_acquired(pg_temp.ws('decl'), '{"shell": true}')$$, 'acquiring -> ready');
SELECT is((pg_temp.row_of('decl')).status, 'ready', 'the workspace is ready');
SELECT is((pg_temp.row_of('decl')).capabilities, '{"shell": true}'::jsonb, 'with the capabilities the backend reported');

-- Acquisition failures.
SELECT pg_temp.make('retry', 'acquiring');
SELECT ok(mesh.workspace_acquire_failed(pg_temp.ws('retry'), true, 'backend unreachable'), 'a retryable failure moves the row');
SELECT is(((pg_temp.row_of('retry')).status, (pg_temp.row_of('retry')).status_reason_code,
           (pg_temp.row_of('retry')).status_reason)::text,
          ('pending'::mesh.workspace_status, 'acquire_interrupted'::mesh.status_reason_code,
           'acquire interrupted: backend unreachable; the run''s next call tries again')::text,
          'a retryable failure: pending, with its code and sentence');
SELECT pg_temp.make('fatal', 'acquiring');
SELECT lives_ok($$SELECT mesh.workspace_acquire_failed(pg_temp.ws('fatal'), false, 'image not found')$$, 'a final failure');
SELECT is(((pg_temp.row_of('fatal')).status, (pg_temp.row_of('fatal')).status_reason)::text,
          ('failed'::mesh.workspace_status, 'image not found')::text, 'fails the workspace with the backend''s words');
SELECT pg_temp.make('gone', 'released');
SELECT ok(NOT mesh.workspace_acquire_failed(pg_temp.ws('gone'), true, 'late'), 'a released row is left as it is');
SELECT is((pg_temp.row_of('gone')).status, 'released', 'and stays released');
SELECT throws_ok($$SELECT mesh.workspace_acquired(pg_temp.ws('gone'), '{}')$$, '55000', NULL,
                 'a released workspace never becomes ready');

-- Waking.
SELECT lives_ok($$SELECT mesh.workspace_begin_wake(pg_temp.ws('retry'))$$, 'a pending row with a reference wakes');
SELECT is(((pg_temp.row_of('retry')).status, (pg_temp.row_of('retry')).status_reason_code)::text,
          ('acquiring'::mesh.workspace_status, NULL::mesh.status_reason_code)::text, 'pending -> acquiring, the reason cleared');
SELECT pg_temp.make('noref', 'pending', NULL);
SELECT throws_ok($$SELECT mesh.workspace_begin_wake(pg_temp.ws('noref'))$$, '55000', NULL,
                 'a row that never named a sandbox has nothing to wake');
-- the agent's limit holds for waking too
SELECT pg_temp.make('busy', 'ready');
SELECT pg_temp.make('sleeper', 'pending');
UPDATE mesh.workspaces SET agent_id = 'st-agent-busy' WHERE id = pg_temp.ws('sleeper');
SELECT mesh.agent_set_budget('st-agent-busy', max_concurrent_workspaces => 1);
SELECT throws_ok($$SELECT mesh.workspace_begin_wake(pg_temp.ws('sleeper'))$$, '53400',
                 'agent "st-agent-busy" already has 1 live workspace(s), its limit is 1',
                 'waking beyond the agent''s limit is refused');

-- Budgets: the reason is rendered from the code.
SELECT is(mesh.workspace_budget_exhausted(pg_temp.ws('busy'), 1.5, 1.5),
          'budget exhausted: stopped after 1.5 compute-seconds (the run''s budget is 1.5)',
          'the budget sentence states what was used and allowed');
SELECT is(((pg_temp.row_of('busy')).status, (pg_temp.row_of('busy')).status_reason_code)::text,
          ('failed'::mesh.workspace_status, 'budget_exhausted'::mesh.status_reason_code)::text, 'ready -> failed, coded');
SELECT is((SELECT runs_stopped_by_budget FROM mesh.spend_by_agent WHERE agent_id = 'st-agent-busy'), 1::bigint,
          'spend_by_agent counts the run by its code');
SELECT is((SELECT detail FROM mesh.events WHERE run_id = 'st-busy' AND kind = 'budget_exhausted'),
          '{"used_seconds": 1.500, "max_compute_seconds": 1.500}'::jsonb, 'the event carries the figures');

-- Releasing.
SELECT is(mesh.workspace_begin_release(pg_temp.ws('busy'), 'done', NULL), 'failed', 'a failed workspace stays failed while released');
SELECT is(mesh.workspace_begin_release(pg_temp.ws('decl'), 'done', NULL), 'releasing', 'ready -> releasing');
INSERT INTO mesh.run_tokens (run_id, token_sha256, expires_at) VALUES ('st-decl', '\x01', now() + interval '1 hour');
SELECT is(mesh.workspace_released(pg_temp.ws('decl'), 'destroyed', NULL), 'released', 'releasing -> released');
SELECT is(((pg_temp.row_of('decl')).release_outcome, (pg_temp.row_of('decl')).release_reason)::text,
          ('destroyed', 'done')::text, 'with its outcome and the reason given when it began');
SELECT ok((SELECT revoked_at IS NOT NULL FROM mesh.run_tokens WHERE run_id = 'st-decl'), 'the run''s tokens are revoked');
SELECT throws_ok($$SELECT mesh.workspace_released(pg_temp.ws('decl'), 'destroyed', NULL)$$, '55000', NULL,
                 'a released workspace is not released twice');
SELECT throws_ok($$SELECT mesh.workspace_begin_release(pg_temp.ws('decl'), NULL, NULL)$$, '55000', NULL,
                 'nor begins a release again');

-- A release that could not finish.
SELECT pg_temp.make('stuck', 'releasing');
SELECT mesh.workspace_release_stuck(pg_temp.ws('stuck'), 'files could not be removed', true, false);
SELECT is(((pg_temp.row_of('stuck')).status_reason, (pg_temp.row_of('stuck')).status_reason_code,
           (pg_temp.row_of('stuck')).release_outcome)::text,
          ('files could not be removed; the reaper retries at its next sweep', 'release_stuck'::mesh.status_reason_code, NULL::text)::text,
          'answered: the reaper retries');
SELECT pg_temp.make('orphaned', 'releasing');
SELECT mesh.workspace_release_stuck(pg_temp.ws('orphaned'), 'backend "x" has no catalog entry', false, true);
SELECT is(((pg_temp.row_of('orphaned')).status_reason, (pg_temp.row_of('orphaned')).release_outcome)::text,
          ('backend "x" has no catalog entry', 'must be released by hand')::text, 'nothing left to reach it with: by hand');

-- Idle hibernation.
SELECT pg_temp.make('idle', 'releasing');
SELECT mesh.workspace_idle_hibernated(pg_temp.ws('idle'));
SELECT is(((pg_temp.row_of('idle')).status, (pg_temp.row_of('idle')).status_reason)::text,
          ('pending'::mesh.workspace_status, 'hibernated after sitting idle')::text, 'releasing -> pending, hibernated');
SELECT throws_ok($$SELECT mesh.workspace_idle_hibernated(pg_temp.ws('idle'))$$, '55000', NULL,
                 'a pending workspace is not hibernated');

-- The reaper's settles.
SELECT pg_temp.make('vanished', 'acquiring');
SELECT is(mesh.workspace_settle('local', 'ref-x-vanished', 'acquiring', 'acquire_interrupted')::text,
          ('st-vanished', 'acquire interrupted: the backend has no sandbox for it (found by the reaper); the run''s next call tries again')::text,
          'acquiring, nothing there -> pending, with the reaper''s sentence');
SELECT is((mesh.workspace_settle('local', 'ref-x-vanished', 'acquiring', 'acquire_interrupted')).run_id, NULL,
          'a row no longer as the reaper saw it is left alone');
SELECT pg_temp.make('lost', 'ready');
SELECT is((mesh.workspace_settle('local', 'ref-x-lost', 'ready', 'lost')).reason,
          'the backend no longer has this workspace (found by the reaper)', 'ready, nothing there -> failed');
SELECT is((SELECT count(*)::int FROM mesh.events WHERE run_id = 'st-lost' AND kind = 'workspace_lost'), 1,
          'a lost workspace is an event');
SELECT pg_temp.make('found', 'pending');
SELECT is((mesh.workspace_settle('local', 'ref-x-found', 'pending', 'found_running')).reason,
          'the backend runs its sandbox (an acquire whose answer was lost; found by the reaper)',
          'pending, running there -> ready');
SELECT throws_ok($$SELECT mesh.workspace_settle('local', 'ref-x-lost', 'failed', 'budget_exhausted')$$, '22023', NULL,
                 'the reaper settles for what it finds, nothing else');

-- Execs.
SELECT pg_temp.make('exec', 'ready');
INSERT INTO ids SELECT 'exec1', mesh.exec_begin(pg_temp.ws('exec'), ARRAY['echo', 'hi'], NULL, ARRAY['A'], 0, 1000);
SELECT is((SELECT (status, argv, env_names)::text FROM mesh.execs WHERE id = pg_temp.ws('exec1')),
          ('running'::mesh.exec_status, ARRAY['echo', 'hi'], ARRAY['A'])::text, 'an exec row, running, with argv and env names');
SELECT throws_ok($$SELECT mesh.exec_begin(pg_temp.ws('noref'), ARRAY['true'], NULL, NULL, 0, 1000)$$, '55000', NULL,
                 'only a ready workspace runs commands');
SELECT mesh.exec_finish(pg_temp.ws('exec1'), 'ok', 0, 'hi', '', false, 0.5, 0.25, 0.25, 'cpu', NULL, NULL,
                        '[{"host": "evil.example", "port": 443, "reason": "not allowed", "at": "now"}]');
SELECT is((SELECT (status, exit_code, charged_seconds)::text FROM mesh.execs WHERE id = pg_temp.ws('exec1')),
          ('ok'::mesh.exec_status, 0, 0.25::float8)::text, 'running -> ok, with its result');
SELECT is((pg_temp.row_of('exec')).compute_seconds, 0.25::float8, 'the run is charged');
SELECT is((SELECT detail->>'host' FROM mesh.events WHERE run_id = 'st-exec' AND kind = 'egress_denied'), 'evil.example',
          'each refused connection is an event');
SELECT throws_ok($$SELECT mesh.exec_finish(pg_temp.ws('exec1'), 'running', NULL, NULL, NULL, NULL, NULL, NULL, 0, 'wall', NULL, NULL, NULL)$$,
                 '22023', NULL, 'an exec cannot finish as running');
SELECT throws_ok($$SELECT mesh.exec_finish(-1, 'ok', 0, NULL, NULL, NULL, NULL, NULL, 0, 'wall', NULL, NULL, NULL)$$,
                 '42704', NULL, 'an unknown exec cannot finish');

-- Lost execs: one function for recovery and the reaper.
INSERT INTO ids SELECT 'old', mesh.exec_begin(pg_temp.ws('exec'), ARRAY['sleep', '9'], NULL, NULL, 0, 1000);
UPDATE mesh.execs SET started_at = clock_timestamp() - interval '1 hour' WHERE id = pg_temp.ws('old');
INSERT INTO ids SELECT 'fresh', mesh.exec_begin(pg_temp.ws('exec'), ARRAY['sleep', '9'], NULL, NULL, 0, 60000);
SELECT is(ARRAY(SELECT exec_id FROM mesh.fail_lost_execs('timeout') WHERE run_id = 'st-exec'), ARRAY[pg_temp.ws('old')],
          'the reaper fails the exec past its timeout, not the fresh one');
SELECT is((SELECT (status, error, charged_seconds)::text FROM mesh.execs WHERE id = pg_temp.ws('old')),
          ('error'::mesh.exec_status, 'lost: no worker finished it within its timeout', 1::float8)::text,
          'charged its timeout, with the cause');
SELECT is((pg_temp.row_of('exec')).compute_seconds, 1.25::float8, 'and the run is charged for it');
SELECT ok(pg_temp.ws('fresh') IN (SELECT exec_id FROM mesh.fail_lost_execs('restart', 0, 1)),
          'a restarted worker fails the execs of the runs it owns');
SELECT is((SELECT error FROM mesh.execs WHERE id = pg_temp.ws('fresh')),
          'interrupted: the server or a mesh worker restarted while the command ran', 'with the restart as the cause');
SELECT throws_ok($$SELECT * FROM mesh.fail_lost_execs('restart')$$, '22023', NULL,
                 'a restart names the worker and the pool size');

-- Background commands: a restart takes them up (never fails them), progress only appends (a
-- stopped stream keeps its length), the clamp is mesh_exec's, the release ends them, a late
-- finish changes nothing.
SELECT pg_temp.make('bgws', 'ready');
INSERT INTO ids SELECT 'bg', mesh.exec_begin(pg_temp.ws('bgws'), ARRAY['sleep', '9'], NULL, NULL, 0, 60000, true);
SELECT ok(pg_temp.ws('bg') NOT IN (SELECT exec_id FROM mesh.fail_lost_execs('restart', 0, 1)),
          'a restarted worker does not fail a background command');
SELECT is(ARRAY(SELECT exec_id FROM mesh.background_execs(0, 1)), ARRAY[pg_temp.ws('bg')],
          'it follows it again instead');
-- a run at settings.max_background_per_run gets no more: refused, its row rolled back
UPDATE mesh.settings SET max_background_per_run = 1;
SELECT throws_ok(format($$SELECT mesh.exec_begin(%s, ARRAY['true'], NULL, NULL, 0, 1000, true)$$, pg_temp.ws('bgws')),
                 '53400', NULL, 'a background command past max_background_per_run is refused 53400');
SELECT is((SELECT count(*) FROM mesh.execs WHERE workspace_id = pg_temp.ws('bgws')), 1::bigint,
          'and leaves no row');
SELECT isnt(mesh.exec_begin(pg_temp.ws('bgws'), ARRAY['true'], NULL, NULL, 0, 1000), NULL,
            'an ordinary command of that run still starts');
DELETE FROM mesh.execs WHERE workspace_id = pg_temp.ws('bgws') AND NOT background;
UPDATE mesh.settings SET max_background_per_run = DEFAULT;
SELECT mesh.exec_output_chunk(pg_temp.ws('bg'), 'stdout', 0, '\x61626364');
SELECT mesh.exec_output_chunk(pg_temp.ws('bg'), 'stdout', 4, '\x65666768');
SELECT lives_ok(format('SELECT mesh.exec_output_progress(%s, 8, 0, 9, 0, 8, NULL, 0)', pg_temp.ws('bg')), 'progress is stored');
SELECT is((SELECT (stdout_bytes, stdout_dropped, stdout_read)::text FROM mesh.execs WHERE id = pg_temp.ws('bg')),
          '(8,0,9)', 'the stream''s stored length, and the backend''s offset kept apart');
SELECT lives_ok(format('SELECT mesh.exec_output_progress(%s, NULL, NULL, 30, 0, 0, ''command limit'', 21)', pg_temp.ws('bg')),
                'a step past the limit stores nothing');
SELECT is((SELECT (stdout_bytes, stdout_dropped, stdout_read, output_stopped, output_unstored)::text FROM mesh.execs WHERE id = pg_temp.ws('bg')),
          '(8,0,30,"command limit",21)', 'the stream keeps its length and head; the row says why and how much was not stored');
SELECT is((SELECT clamped || '|' || truncated FROM mesh.exec_output_clamped(pg_temp.ws('bg'), 'stdout', 2)),
          E'a\n\u2026[mesh: 6 bytes omitted]\u2026\nh|true', 'the clamp is mesh_exec''s: head and tail of what is kept');
SELECT mesh.workspace_released(pg_temp.ws('bgws'), 'destroyed', NULL);
SELECT is((SELECT status::text || ': ' || error FROM mesh.execs WHERE id = pg_temp.ws('bg')),
          'killed: killed: the run released its workspace', 'the release ends a running background command');
SELECT lives_ok(format($$SELECT mesh.exec_finish(%s, 'ok', 0, '', '', false, 1, 1, 1, 'cpu', NULL, NULL, NULL)$$, pg_temp.ws('bg')),
                'a finish that comes after the release is no error');
SELECT is((SELECT status::text FROM mesh.execs WHERE id = pg_temp.ws('bg')), 'killed', 'and changes nothing');

-- Files and tokens.
SELECT lives_ok($$SELECT mesh.workspace_file_event(pg_temp.ws('exec'), 'file_write', '/w/a', 3, NULL)$$, 'a file write is an event');
SELECT is((SELECT detail FROM mesh.events WHERE run_id = 'st-exec' AND kind = 'file_write'),
          '{"path": "/w/a", "bytes": 3}'::jsonb, 'with its path and size');
SELECT throws_ok($$SELECT mesh.workspace_file_event(pg_temp.ws('exec'), 'file_delete', '/w/a', 3, NULL)$$, '22023', NULL,
                 'only reads and writes are file events');
SELECT throws_ok($$SELECT mesh.run_token_mint(pg_temp.ws('noref'), '\x02')$$, '55000', NULL,
                 'only a ready workspace gets a run token');

SELECT * FROM finish();
ROLLBACK;
