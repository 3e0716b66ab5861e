-- snapshots: a project run's /workspace captured, later runs of the project and forks
-- (from_snapshot) starting from it as their own copy, and the refusals of the API.
\set ON_ERROR_STOP 0
-- declaring: project names and snapshots are checked, nothing is called
SELECT * FROM regress.try($$SELECT mesh_acquire('snap-bad', 'agent-s', 'alice', project => E'repo\nname')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('snap-bad', 'agent-s', 'alice', project => 'a/../b')$$);
-- what a project name may be (mesh.project_name_valid, the CHECK of every row with one)
SELECT CASE WHEN length(p) > 20 THEN length(p) || ' bytes' ELSE p END AS project, mesh.project_name_valid(p) AS valid
  FROM unnest(ARRAY['acme/app', '@scope/pkg', 'a/b.c:d+e-f@g_h', 'a..b', 'a//b', '.x', '-x', '/x',
                    'a b', 'café', '', 'a/.b', repeat('a', 200), repeat('a', 201)]) p;
SELECT * FROM regress.try($$SELECT mesh_acquire('snap-bad', 'agent-s', 'alice', from_snapshot => 987654)$$);
SELECT count(*) AS rows_for_refused FROM mesh.workspaces WHERE run_id = 'snap-bad';
SELECT run_id, status, project, from_snapshot, snapshot_id
  FROM mesh_acquire('snap-a', 'agent-s', 'alice', project => 'github.com/org/app');

-- mesh_snapshot refuses what it cannot capture
SELECT * FROM regress.try($$SELECT mesh_snapshot('snap-a')$$);
SELECT * FROM regress.try($$SELECT mesh_snapshot('no-such-run')$$);
SELECT * FROM regress.try($$SELECT mesh_snapshot(NULL)$$);
SELECT run_id FROM mesh_acquire('snap-none', 'agent-s', 'alice');
SELECT exit_code FROM mesh_exec('snap-none', ARRAY['true']);
SELECT * FROM regress.try($$SELECT mesh_snapshot('snap-none')$$);

-- run A writes a tree and captures it (the set-up NOTICE says why it started empty)
SELECT exit_code FROM mesh_exec('snap-a', ARRAY['sh', '-c', 'mkdir -p node_modules/left && echo v1 > node_modules/left/index.js && echo readme > README']);
SELECT project, status, size_bytes, file_count, source_run_id, actor_id, ready_at IS NOT NULL AS has_ready_at
  FROM mesh_snapshot('snap-a');
SELECT kind FROM mesh.events WHERE run_id = 'snap-a' AND kind LIKE 'snapshot%' ORDER BY id;
-- the run keeps working after its capture
SELECT stdout FROM mesh_exec('snap-a', ARRAY['cat', 'README']);

-- run B of the same project starts from it (NOTICEs carry the age: not shown here)
SET client_min_messages = warning;
SELECT run_id FROM mesh_acquire('snap-b', 'agent-s', 'bob', project => 'github.com/org/app');
SELECT stdout FROM mesh_exec('snap-b', ARRAY['sh', '-c', 'cat README node_modules/left/index.js; echo b-was-here > README']);
-- run C forks from the same snapshot: B's writes are not there
SELECT run_id, project FROM mesh_acquire('snap-c', 'agent-s', 'carol',
                                         from_snapshot => (SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-a'));
SELECT stdout FROM mesh_exec('snap-c', ARRAY['cat', 'README']);
RESET client_min_messages;
SELECT w.run_id, s.source_run_id AS stands_on_capture_of
  FROM mesh.workspaces w JOIN mesh.snapshots s ON s.id = w.snapshot_id
 WHERE w.run_id LIKE 'snap-%' ORDER BY w.run_id;
SELECT project, current, live_workspaces FROM mesh.project_snapshots WHERE project = 'github.com/org/app';

-- a new capture becomes current and retires the previous one
SELECT status, file_count FROM mesh_snapshot('snap-b');
SELECT source_run_id, status, current, live_workspaces FROM mesh.project_snapshots
 WHERE project = 'github.com/org/app' ORDER BY created_at;
-- (snapshot ids are random: shown as <id>)
SELECT state, replace(message, (SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-a')::text, '<id>') AS message, hint
  FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, from_snapshot => %s)', 'snap-d', 'agent-s', 'dan',
                          (SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-a')));
-- a fork naming another project is refused
SELECT state, replace(message, (SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-b')::text, '<id>') AS message, hint
  FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, project => %L, from_snapshot => %s)', 'snap-d', 'agent-s', 'dan',
                          'other', (SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-b')));

-- retiring is for admins
SET ROLE mesh_harness;
SELECT has_function_privilege(current_user, 'mesh.snapshot_retire(bigint)', 'EXECUTE') AS harness_may_retire;
RESET ROLE;
SELECT status, status_reason LIKE 'retired by %' AS says_who
  FROM mesh.snapshot_retire((SELECT id FROM mesh.snapshots WHERE source_run_id = 'snap-b'));
SELECT * FROM regress.try('SELECT mesh.snapshot_retire(NULL)');
SELECT * FROM regress.try('SELECT mesh.snapshot_retire(987654)');

-- released runs cannot be captured
SELECT mesh_release('snap-a'), mesh_release('snap-b'), mesh_release('snap-c'), mesh_release('snap-none');
SELECT * FROM regress.try($$SELECT mesh_snapshot('snap-b')$$);
