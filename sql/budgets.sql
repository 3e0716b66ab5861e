-- budgets: compute limits bound each exec and stop the run with a reason; the
-- concurrency limit; spend is recorded with its basis; the operator's sweep.
\set ON_ERROR_STOP 0

-- an agent with 1.5 compute-seconds per run
SELECT mesh.agent_set_budget('frugal', max_compute_seconds => 1.5);
SELECT status FROM mesh_acquire('budget-1', 'frugal', 'grace');
SELECT exit_code, status FROM mesh_exec('budget-1', ARRAY['true']);
-- a command that would run for a minute is stopped when the budget runs out
SELECT exit_code <> 0 AS killed, status FROM mesh_exec('budget-1', ARRAY['sh', '-c', 'while :; do :; done'], timeout => '60 seconds');
-- the run is stopped with a reason stating the limit and what was used, and its sandbox released
SELECT status, status_reason LIKE 'budget exhausted: stopped after 1.5 compute-seconds (the run''s budget is 1.5)' AS reason_states_limit,
       compute_seconds >= 1.5 AS charged
  FROM mesh.workspaces WHERE run_id = 'budget-1';
SELECT state, message LIKE '%stopped after 1.5 compute-seconds (the run''s budget is 1.5)' AS says_why
  FROM regress.try($$SELECT mesh_exec('budget-1', ARRAY['true'])$$);
SELECT state FROM regress.try($$SELECT mesh_write_file('budget-1', 'x', 'y')$$);
-- the worker released the sandbox itself; the harness's release finds it done
SELECT mesh_release('budget-1');
SELECT status, release_outcome FROM mesh.workspaces WHERE run_id = 'budget-1';
SELECT kind FROM mesh.events WHERE run_id = 'budget-1' ORDER BY id;
-- every exec was charged, on a recorded basis
SELECT argv[1], status, charged_seconds > 0 AS charged, charge_basis IN ('cpu', 'wall') AS basis_recorded
  FROM mesh.execs WHERE run_id = 'budget-1' ORDER BY id;

-- a per-run override beats the agent's budget
SELECT status FROM mesh_acquire('budget-2', 'frugal', 'grace');
SELECT mesh.run_set_budget('budget-2', max_compute_seconds => 100);
SELECT exit_code, status FROM mesh_exec('budget-2', ARRAY['sleep', '2']);
SELECT status FROM mesh.workspaces WHERE run_id = 'budget-2';
SELECT mesh_release('budget-2');

-- at most N live workspaces per agent: the next one is refused until one is released
SELECT mesh.agent_set_budget('narrow', max_concurrent_workspaces => 1);
SELECT status FROM mesh_acquire('narrow-1', 'narrow', 'henry');
SELECT status FROM mesh_acquire('narrow-2', 'narrow', 'henry');
SELECT exit_code FROM mesh_exec('narrow-1', ARRAY['true']);
SELECT * FROM regress.try($$SELECT mesh_exec('narrow-2', ARRAY['true'])$$);
SELECT status FROM mesh.workspaces WHERE run_id = 'narrow-2';
SELECT mesh_release('narrow-1');
SELECT exit_code FROM mesh_exec('narrow-2', ARRAY['true']);
SELECT mesh_release('narrow-2');

-- spend per run and per agent
SELECT run_id, execs, wall_charged_seconds + cpu_charged_seconds >= 1.5 AS spent_budget
  FROM mesh.spend_by_run WHERE run_id = 'budget-1';
SELECT agent_id, runs, runs_stopped_by_budget FROM mesh.spend_by_agent WHERE agent_id IN ('frugal', 'narrow') ORDER BY 1;

-- the operator's sweep: an idle workspace hibernates and wakes on its next use
SELECT mesh.agent_set_budget('sleepy', idle_timeout => '1 second');
SELECT status FROM mesh_acquire('idle-1', 'sleepy', 'ivy');
SELECT exit_code FROM mesh_exec('idle-1', ARRAY['sh', '-c', 'echo kept > note.txt']);
SELECT pg_sleep(1.5);
SELECT action, run_id, detail FROM mesh.sweep() WHERE run_id = 'idle-1';
SELECT status, status_reason FROM mesh.workspaces WHERE run_id = 'idle-1';
SELECT mesh.agent_set_budget('sleepy');
SELECT stdout FROM mesh_exec('idle-1', ARRAY['cat', 'note.txt']);
SELECT mesh_release('idle-1');

-- a workspace that outlived the longest possible run is released by the sweep
SELECT status FROM mesh_acquire('old-1', 'agent-o', 'jack');
SELECT exit_code FROM mesh_exec('old-1', ARRAY['true']);
SELECT max_run_lifetime FROM mesh.set_policy(max_run_lifetime => '1 second');
SELECT pg_sleep(1.2);
SELECT action, run_id, detail FROM mesh.sweep() WHERE run_id = 'old-1';
SELECT max_run_lifetime FROM mesh.set_policy(max_run_lifetime => '24 hours');
SELECT status, release_outcome, release_reason FROM mesh.workspaces WHERE run_id = 'old-1';
