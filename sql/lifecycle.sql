-- lifecycle: lazy acquisition, exec semantics, release, and refusal after release.
\set ON_ERROR_STOP 0
-- declaring a run costs a row and nothing else
SELECT run_id, agent_id, created_by_actor_id, status, backend_kind, external_ref
  FROM mesh_acquire('life-1', 'agent-l', 'alice');
SELECT count(*) AS backend_calls FROM mesh.events WHERE run_id = 'life-1';
-- idempotent for the same run
SELECT run_id, status FROM mesh_acquire('life-1', 'agent-l', 'alice');

-- the first exec materializes the workspace, telling the caller once
SELECT exit_code, stdout, stderr, status, truncated FROM mesh_exec('life-1', ARRAY['echo', 'hello', 'world']);
SELECT status, backend_kind, size, materialized_at IS NOT NULL AS materialized
  FROM mesh.workspaces WHERE run_id = 'life-1';
SELECT kind FROM mesh.events WHERE run_id = 'life-1' ORDER BY id;
-- later calls reuse it silently
SELECT exit_code, stdout FROM mesh_exec('life-1', ARRAY['sh', '-c', 'echo out; echo err >&2; exit 3']);
SELECT stderr FROM mesh_exec('life-1', ARRAY['sh', '-c', 'echo err >&2']);
-- stdin, env, dir
SELECT stdout FROM mesh_exec('life-1', ARRAY['cat'], stdin => 'from stdin'::bytea);
SELECT stdout FROM mesh_exec('life-1', ARRAY['sh', '-c', 'echo $GREETING'], env => '{"GREETING": "hi there"}');
SELECT exit_code FROM mesh_exec('life-1', ARRAY['mkdir', '-p', 'sub/dir']);
SELECT stdout FROM mesh_exec('life-1', ARRAY['pwd'], dir => 'sub/dir');
SELECT stdout FROM mesh_exec('life-1', ARRAY['pwd']);
-- a missing program exits 127
SELECT exit_code, status FROM mesh_exec('life-1', ARRAY['no-such-program-xyz']);
-- the command's own timeout is a status, not an error
SELECT exit_code <> 0 AS failed, status FROM mesh_exec('life-1', ARRAY['sleep', '30'], timeout => '300 ms');
-- large output is clamped, head and tail kept with a marker
SELECT status, truncated, length(stdout) < 200000 AS clamped, stdout LIKE '%bytes omitted%' AS marked,
       left(stdout, 6) AS head, right(stdout, 7) AS tail
  FROM mesh_exec('life-1', ARRAY['sh', '-c', 'echo start; head -c 300000 /dev/zero | tr "\0" x; echo; echo finish']);
-- every exec is a row
SELECT argv, status, exit_code FROM mesh.execs WHERE run_id = 'life-1' ORDER BY id;
SELECT count(*) FILTER (WHERE charged_seconds IS NULL) AS uncharged,
       count(*) FILTER (WHERE status = 'running') AS running
  FROM mesh.execs WHERE run_id = 'life-1';

-- release reports its outcome; the run can no longer reach the workspace
SELECT mesh_release('life-1', 'test finished');
SELECT status, release_outcome, release_reason FROM mesh.workspaces WHERE run_id = 'life-1';
SELECT * FROM mesh_exec('life-1', ARRAY['true']);
SELECT mesh_read_file('life-1', 'x');
SELECT mesh_release('life-1');

-- a run that never executed anything never materializes
SELECT status FROM mesh_acquire('life-chat', 'agent-l', 'alice');
SELECT mesh_release('life-chat');

-- a child run gets its own workspace
SELECT status FROM mesh_acquire('life-parent', 'agent-l', 'bob');
SELECT parent_run_id FROM mesh_acquire('life-child', 'agent-l', 'bob', 'life-parent');
SELECT stdout FROM mesh_exec('life-parent', ARRAY['sh', '-c', 'echo parent > mine.txt; cat mine.txt']);
SELECT stdout, exit_code FROM mesh_exec('life-child', ARRAY['sh', '-c', 'ls mine.txt 2>/dev/null; echo done']);
SELECT count(DISTINCT external_ref) AS distinct_workspaces
  FROM mesh.workspaces WHERE run_id IN ('life-parent', 'life-child');
SELECT mesh_release('life-parent'), mesh_release('life-child');
