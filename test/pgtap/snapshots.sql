-- test/pgtap/snapshots.sql: the snapshot table's state machine and the SQL functions the
-- workers call for it (declare, choose at materialization, begin/finish a capture, retire,
-- reclaim, reconcile), the operators' view and who may call what. Rows are made directly
-- here (as the workers would) and everything is rolled back.
BEGIN;
SELECT plan(52);

SELECT has_table('mesh', 'snapshots', 'table mesh.snapshots');
SELECT enum_has_labels('mesh', 'snapshot_status', ARRAY['capturing', 'ready', 'retired', 'reclaimed', 'failed']);
SELECT has_index('mesh', 'snapshots', 'snapshots_current_idx', 'the current snapshot is found by index');
SELECT has_view('mesh', 'project_snapshots', 'operators'' view mesh.project_snapshots');

-- two backends of the catalog (names only matter here), runs declared on them
INSERT INTO mesh.backends (name, driver, enabled, config) VALUES ('snap-a', 'sandboxd', false, '{}'), ('snap-b', 'sandboxd', false, '{}');
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref, project)
VALUES ('snap-run-a', 'ag', 'alice', 'ready', 'snap-a', 'ref-a', 'github.com/org/repo'),
       ('snap-run-noproj', 'ag', 'alice', 'ready', 'snap-a', 'ref-n', NULL),
       ('snap-run-pending', 'ag', 'alice', 'pending', NULL, NULL, 'github.com/org/repo');

-- declare: project names and from_snapshot
SELECT is(mesh.snapshot_declare('github.com/org/repo', NULL), 'github.com/org/repo', 'a repository name is a project');
SELECT throws_ok($$SELECT mesh.snapshot_declare(E'a b\n', NULL)$$, '22023', NULL, 'a project with odd characters is refused');
SELECT throws_ok($$SELECT mesh.snapshot_declare('../etc', NULL)$$, '22023', NULL, '".." is refused');
SELECT throws_ok($$SELECT mesh.snapshot_declare(repeat('a', 201), NULL)$$, '22023', NULL, 'over 200 characters is refused');
SELECT throws_ok($$SELECT mesh.snapshot_declare(NULL, 999999)$$, '42501', 'snapshot 999999 does not exist or is not shared with this role', 'an unknown from_snapshot is refused');

-- capture: refusals, then a capture that becomes ready
SELECT throws_ok($$SELECT mesh.snapshot_begin('snap-run-noproj', true)$$, '55000', 'run "snap-run-noproj" names no project', 'a run without a project cannot be captured');
SELECT throws_ok($$SELECT mesh.snapshot_begin('snap-run-pending', true)$$, '55000', NULL, 'an unmaterialized run cannot be captured');
SELECT throws_ok($$SELECT mesh.snapshot_begin('snap-run-a', false)$$, '0A000', NULL, 'a backend without the capability is refused');
SELECT throws_ok($$SELECT mesh.snapshot_begin('no-such-run', true)$$, '42704', NULL, 'an unknown run is refused');
CREATE TEMP TABLE s1 AS SELECT * FROM mesh.snapshot_begin('snap-run-a', true);
SELECT is((SELECT status::text FROM s1), 'capturing', 'the row is written before the backend call, capturing');
SELECT is((SELECT project || ' ' || backend || ' ' || actor_id FROM s1), 'github.com/org/repo snap-a alice', 'it records project, backend and actor');
SELECT mesh.snapshot_named((SELECT id FROM s1), 'snap-ref-1');
SELECT throws_ok(format('SELECT mesh.snapshot_declare(NULL, %s)', (SELECT id FROM s1)), '55000', NULL, 'a capturing snapshot cannot be started from');
SELECT is((mesh.snapshot_finish((SELECT id FROM s1), true, 1000, 10, NULL)).status::text, 'ready', 'a finished capture is ready');
SELECT is(mesh.snapshot_declare(NULL, (SELECT id FROM s1)), 'github.com/org/repo', 'from_snapshot alone declares the snapshot''s project');
SELECT throws_ok(format($$SELECT mesh.snapshot_declare('other', %s)$$, (SELECT id FROM s1)), '22023', NULL, 'a snapshot of another project is refused');

-- a second capture retires the first
CREATE TEMP TABLE s2 AS SELECT * FROM mesh.snapshot_begin('snap-run-a', true);
SELECT mesh.snapshot_named((SELECT id FROM s2), 'snap-ref-2');
SELECT is((mesh.snapshot_finish((SELECT id FROM s2), true, 2000, 20, NULL)).status::text, 'ready', 'the new capture is ready');
SELECT is((SELECT status::text FROM mesh.snapshots WHERE id = (SELECT id FROM s1)), 'retired', 'and the previous current one is retired');
SELECT is((SELECT count(*)::int FROM mesh.snapshots WHERE project = 'github.com/org/repo' AND status = 'ready'), 1, 'one current snapshot per project and backend');
SELECT throws_ok(format('SELECT mesh.snapshot_declare(NULL, %s)', (SELECT id FROM s1)), '55000', NULL, 'a retired snapshot cannot be started from');
SELECT is((mesh.snapshot_finish((SELECT id FROM s1), false, NULL, NULL, 'late')).status::text, 'retired', 'a late finish leaves a settled row alone');

-- a failed capture
CREATE TEMP TABLE s3 AS SELECT * FROM mesh.snapshot_begin('snap-run-a', true);
SELECT is((mesh.snapshot_finish((SELECT id FROM s3), false, NULL, NULL, 'disk full')).status_reason, 'disk full', 'a failed capture keeps its reason');
SELECT is((SELECT status::text FROM mesh.snapshots WHERE id = (SELECT id FROM s2)), 'ready', 'and the current one stays current');

-- materialization: which snapshot a workspace stands on, or why none
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, project)
VALUES ('snap-run-b', 'ag', 'bob', 'acquiring', 'github.com/org/repo'),
       ('snap-run-c', 'ag', 'bob', 'acquiring', 'never-captured'),
       ('snap-run-d', 'ag', 'bob', 'acquiring', NULL);
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, project, from_snapshot)
VALUES ('snap-run-e', 'ag', 'bob', 'acquiring', 'github.com/org/repo', (SELECT id FROM s2)),
       ('snap-run-f', 'ag', 'bob', 'acquiring', 'github.com/org/repo', (SELECT id FROM s1));
SELECT matches((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-b'), 'snap-a', true)).notice,
               '^snapshot [0-9]+ of project "github.com/org/repo": 2000 bytes in 20 files, captured [0-9:]+ ago$', 'a project run stands on its current snapshot (the notice says which, its age and size)');
SELECT is((SELECT snapshot_id FROM mesh.workspaces WHERE run_id = 'snap-run-b'), (SELECT id FROM s2), 'and its row records it');
SELECT is((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-c'), 'snap-a', true)).notice,
          'no snapshot yet for project "never-captured": it starts empty', 'a project without a snapshot starts empty, and says so');
SELECT is((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-b'), 'snap-a', false)).notice,
          'backend "snap-a" cannot snapshot: project "github.com/org/repo" starts empty', 'a backend without the capability is named as the reason');
SELECT is((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-d'), 'snap-a', true)).notice,
          'the run names no project: it starts empty', 'a run without a project starts empty');
SELECT is((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-b'), 'snap-b', true)).notice,
          'no snapshot yet for project "github.com/org/repo": it starts empty', 'another backend''s snapshot is not a project''s on this one');
SELECT throws_ok($$SELECT mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-e'), 'snap-b', true)$$, '55000', NULL,
                 'a named snapshot of another backend is refused, not started empty');
SELECT throws_ok($$SELECT mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-e'), 'snap-a', false)$$, '0A000', NULL,
                 'a named snapshot on a backend that cannot snapshot is refused');
SELECT throws_ok($$SELECT mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-f'), 'snap-a', true)$$, '55000', NULL,
                 'a named snapshot retired since the declaration is refused');
SELECT is((mesh.snapshot_choose((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-e'), 'snap-a', true)).external_ref, 'snap-ref-2',
          'a named ready snapshot of this backend is used');

-- the operators' view
SELECT is((SELECT live_workspaces::int FROM mesh.project_snapshots WHERE snapshot_id = (SELECT id FROM s2)), 2, 'the view counts live workspaces standing on a snapshot');
SELECT is((SELECT array_agg(snapshot_id) FILTER (WHERE current) || count(*) FROM mesh.project_snapshots WHERE project = 'github.com/org/repo'),
          ARRAY[(SELECT id FROM s2), 3], 'and says which snapshot is current');

-- a failed run's workspace holds its (retired) snapshot until released; it keeps its status then
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref, project, snapshot_id)
VALUES ('snap-run-failed', 'ag', 'alice', 'failed', 'snap-a', 'ref-f', 'github.com/org/repo', (SELECT id FROM s1));
SELECT is(mesh.snapshot_live_workspaces((SELECT id FROM s1)), 1::bigint, 'a failed workspace not yet released holds its snapshot');
SELECT is(mesh.workspace_released((SELECT id FROM mesh.workspaces WHERE run_id = 'snap-run-failed'), 'destroyed', NULL)::text, 'failed',
          'its release keeps the failed status');
SELECT is(mesh.snapshot_live_workspaces((SELECT id FROM s1)), 0::bigint, 'and frees the snapshot');

-- retire and reclaim: only what no live workspace stands on
SELECT is((mesh.snapshot_retire((SELECT id FROM s2))).status::text, 'retired', 'the admin retires a snapshot');
SELECT is(ARRAY(SELECT id FROM mesh.snapshot_reclaimable('snap-a', 10)), ARRAY[(SELECT id FROM s1)], 'only retired snapshots no live workspace stands on are reclaimable');
UPDATE mesh.workspaces SET status = 'released' WHERE run_id IN ('snap-run-b', 'snap-run-e');
SELECT is(ARRAY(SELECT id FROM mesh.snapshot_reclaimable('snap-a', 10) ORDER BY id), ARRAY(SELECT id FROM s1 UNION ALL SELECT id FROM s2 ORDER BY id), 'released workspaces hold nothing');
SELECT mesh.snapshot_reclaimed((SELECT id FROM s1));
SELECT is((SELECT status::text FROM mesh.snapshots WHERE id = (SELECT id FROM s1)), 'reclaimed', 'a reclaimed snapshot is recorded so');

-- reconcile: a vanished snapshot fails, an unexplained one is to be deleted, a capture in flight is left
CREATE TEMP TABLE s4 AS SELECT * FROM mesh.snapshot_begin('snap-run-a', true);
SELECT mesh.snapshot_named((SELECT id FROM s4), 'snap-ref-4');
SELECT results_eq($$SELECT failed, external_ref FROM mesh.snapshot_reconcile('snap-a', '[{"ref":"stray-1","state":"ready"},{"ref":"snap-ref-4","state":"capturing"}]', '0'::interval) ORDER BY 1$$,
                  $$VALUES (false, 'stray-1'), (true, 'snap-ref-2')$$,
                  'reconciliation fails what vanished and names what no row explains, leaving a capture in flight');

-- who may do what
SELECT ok(has_function_privilege('mesh_admin', 'mesh.snapshot_retire(bigint)', 'EXECUTE'), 'the admin retires snapshots');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.snapshot_retire(bigint)', 'EXECUTE'), 'the harness cannot retire snapshots');
SELECT ok(has_table_privilege('mesh_admin', 'mesh.project_snapshots', 'SELECT') AND NOT has_table_privilege('mesh_harness', 'mesh.snapshots', 'SELECT'),
          'the admin reads the view; the harness does not read the table');
SELECT ok(NOT has_function_privilege('public', 'mesh.snapshot_begin(text, boolean)', 'EXECUTE'), 'PUBLIC cannot begin captures');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.snapshot_reclaim_soon()', 'EXECUTE')
          AND NOT has_function_privilege('public', 'mesh.snapshot_reclaim_soon()', 'EXECUTE'),
          'only the install script''s functions wake the reaper');
SELECT ok(has_function_privilege('mesh_harness', 'mesh_snapshot(text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'mesh_snapshot(text)', 'EXECUTE'),
          'the harness calls mesh_snapshot; PUBLIC does not');

SELECT * FROM finish();
ROLLBACK;
