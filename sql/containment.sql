-- containment: the database is protected from what its callers send and what
-- its sandboxes do.  Inputs are bounded in the calling backend before the
-- hand-off; exec rows record peak memory where the backend meters it; a run
-- that ran out of memory raises its agent's tier once, visibly, until enough
-- clean runs reset it.
\set ON_ERROR_STOP 0
SET client_min_messages = warning;
DROP ROLE IF EXISTS contain_harness;
RESET client_min_messages;
CREATE ROLE contain_harness LOGIN IN ROLE mesh_harness;
GRANT USAGE ON SCHEMA regress TO contain_harness;

-- the limits are settings a harness member cannot raise
SHOW mesh.max_stdin_size;
SHOW mesh.max_file_size;
SET ROLE contain_harness;
SELECT state FROM regress.try($$SET mesh.max_stdin_size = '1GB'$$);

-- a 250 MB stdin from a harness member is refused before the hand-off,
-- with the argument, the size, the limit and the setting named
SELECT status FROM mesh_acquire('contain-1', 'bounded-agent', 'ivy');
SELECT * FROM regress.try($$SELECT mesh_exec('contain-1', ARRAY['wc', '-c'], stdin => decode(repeat('a', 250000000), 'escape'))$$);
-- one byte over the limit: the same, and the run was never even materialized
SELECT * FROM regress.try($$SELECT mesh_exec('contain-1', ARRAY['wc', '-c'], stdin => decode(repeat('a', 16 * 1024 * 1024 + 1), 'escape'))$$);
-- a file one byte over mesh.max_file_size is refused at once, before any upload
SELECT * FROM regress.try($$SELECT mesh_write_file('contain-1', 'big.bin', decode(repeat('a', 16 * 1024 * 1024 + 1), 'escape'))$$);
RESET ROLE;
SELECT status, backend_kind IS NULL AS no_backend_called FROM mesh.workspaces WHERE run_id = 'contain-1';
SELECT count(*) AS execs FROM mesh.execs WHERE run_id = 'contain-1';
SELECT kind FROM mesh.events WHERE run_id = 'contain-1' ORDER BY id;

-- a value stored out of line is measured from its header, never fetched to be refused
CREATE TEMP TABLE contain_big AS SELECT decode(repeat('b', 16 * 1024 * 1024 + 1), 'escape') AS b;
SELECT pg_column_size(b) < 1024 * 1024 AS stored_compressed FROM contain_big;
SELECT * FROM regress.try($$SELECT mesh_exec('contain-1', ARRAY['wc', '-c'], stdin => (SELECT b FROM contain_big))$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('contain-1', 'big.bin', (SELECT b FROM contain_big))$$);
-- the server is up and the session works on
SELECT 1 AS still_here;

-- at the limit it passes, exactly as sent (a superuser lowered the limits for this session)
SET mesh.max_stdin_size = 1024;
SET mesh.max_file_size = 1024;
SET ROLE contain_harness;
SELECT stdout, status FROM mesh_exec('contain-1', ARRAY['wc', '-c'], stdin => decode(repeat('s', 1024), 'escape'));
SELECT * FROM regress.try($$SELECT mesh_exec('contain-1', ARRAY['wc', '-c'], stdin => decode(repeat('s', 1025), 'escape'))$$);
SELECT mesh_write_file('contain-1', 'at-limit.bin', decode(repeat('f', 1024), 'escape'));
SELECT length(mesh_read_file('contain-1', 'at-limit.bin')) AS bytes;
SELECT * FROM regress.try($$SELECT mesh_write_file('contain-1', 'over.bin', decode(repeat('f', 1025), 'escape'))$$);
RESET ROLE;
RESET mesh.max_stdin_size;
RESET mesh.max_file_size;
-- the refused calls left no exec and no write behind
SELECT argv[1], stdin_bytes, status FROM mesh.execs WHERE run_id = 'contain-1' ORDER BY id;
SELECT kind, detail->>'path' AS path FROM mesh.events WHERE run_id = 'contain-1' AND kind LIKE 'file_%' ORDER BY id;

-- stdin well past the pipe buffer arrives whole (encoded once on the way)
SELECT stdout FROM mesh_exec('contain-1', ARRAY['sha256sum'], stdin => decode(repeat('x', 3 * 1024 * 1024), 'escape'));
SELECT encode(sha256(decode(repeat('x', 3 * 1024 * 1024), 'escape')), 'hex') AS expected;

-- peak memory is recorded where the backend meters memory, and only there
SELECT e.memory_peak_bytes IS NOT NULL = coalesce((w.capabilities->>'resource_limits')::boolean, false) AS peak_iff_metered,
       coalesce(e.memory_peak_bytes > 0, true) AS peak_positive
  FROM mesh.exec_log e JOIN mesh.workspaces w ON w.run_id = e.run_id
 WHERE e.run_id = 'contain-1' ORDER BY e.exec_id LIMIT 1;
SELECT mesh_release('contain-1');

------------------------------------------------------------------------------
-- OOM-aware tier climb, its bookkeeping alone: an exec is marked oom as the
-- worker records it, then the worker's own state function runs, so every
-- branch (climb, once per run, clean runs, reset, cap) is quick to reach.
-- test/e2e/oom_climb.t provokes a real OOM through the whole path.
------------------------------------------------------------------------------
CREATE FUNCTION regress.oom_run(run text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    e bigint;
BEGIN
    SELECT exec_id INTO e FROM mesh_exec(run, ARRAY['true']);
    UPDATE mesh.execs SET status = 'oom', exit_code = 137 WHERE id = e;
    PERFORM mesh.tier_climb_on_oom(e);
    RETURN (SELECT size::text FROM mesh.workspaces WHERE run_id = run);
END $$;
CREATE FUNCTION regress.clean_run(run text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mesh_acquire(run, 'climber', 'ivy');
    PERFORM mesh_exec(run, ARRAY['true']);
    PERFORM mesh_release(run);
    RETURN (SELECT size::text FROM mesh.workspaces WHERE run_id = run);
END $$;
SELECT tier_climb_reset_runs FROM mesh.set_policy(tier_climb_reset_runs => 2);
SELECT * FROM regress.try($$SELECT mesh.set_policy(tier_climb_reset_runs => 0)$$);

-- a run at "standard" runs out of memory, twice: the agent climbs once, to "large"
SELECT status FROM mesh_acquire('climb-1', 'climber', 'ivy');
SELECT regress.oom_run('climb-1') AS tier;
SELECT regress.oom_run('climb-1') AS tier;
SELECT change, agent_id, run_id, from_size, to_size, climbed_size_now, clean_runs_since_climb
  FROM mesh.tier_climbs WHERE agent_id = 'climber' ORDER BY at;
SELECT count(*) AS climb_events FROM mesh.events WHERE run_id = 'climb-1' AND kind = 'tier_climb';
SELECT (SELECT exec_id FROM mesh.tier_climbs WHERE run_id = 'climb-1') =
       (SELECT min(id) FROM mesh.execs WHERE run_id = 'climb-1') AS names_the_first_oom_exec;
SELECT mesh_release('climb-1');
-- the run that ran out of memory is not a clean run
SELECT climbed_size, clean_runs_since_climb FROM mesh.agents WHERE agent_id = 'climber';

-- the agent's next run gets the climbed tier, recorded at materialization
SELECT regress.clean_run('climb-2') AS tier;
SELECT detail->>'size' AS acquired_at FROM mesh.events WHERE run_id = 'climb-2' AND kind = 'acquiring';
SELECT climbed_size, clean_runs_since_climb FROM mesh.agents WHERE agent_id = 'climber';
-- a run that never ran a command does not count
SELECT status FROM mesh_acquire('climb-idle', 'climber', 'ivy');
SELECT mesh_release('climb-idle');
SELECT climbed_size, clean_runs_since_climb FROM mesh.agents WHERE agent_id = 'climber';
-- the second clean run at the climbed tier resets the climb
SELECT regress.clean_run('climb-3') AS tier;
SELECT change, run_id, from_size, to_size, climbed_size_now FROM mesh.tier_climbs WHERE agent_id = 'climber' ORDER BY at;
SELECT regress.clean_run('climb-4') AS tier;

-- climbing is bounded by the backend's max_size: at the ceiling it is capped, and says so
SELECT mesh.backend_set_max_size('local', 'large');
SELECT mesh.agent_set('big-climber', default_size => 'xlarge');
SELECT status FROM mesh_acquire('climb-cap', 'big-climber', 'ivy');
SELECT regress.oom_run('climb-cap') AS tier;
SELECT change, from_size, to_size, climbed_size_now FROM mesh.tier_climbs WHERE agent_id = 'big-climber';
SELECT detail->>'max_size' AS max_size FROM mesh.events WHERE run_id = 'climb-cap' AND kind = 'tier_climb_capped';
SELECT mesh_release('climb-cap');
SELECT mesh.backend_set_max_size('local', 'xlarge');

-- an exec that is not oom climbs nothing
SELECT status FROM mesh_acquire('climb-ok', 'calm-agent', 'ivy');
SELECT exec_id AS ok_exec FROM mesh_exec('climb-ok', ARRAY['true']) \gset
SELECT mesh.tier_climb_on_oom(:ok_exec);
SELECT count(*) AS calm_climbs FROM mesh.tier_climbs WHERE agent_id = 'calm-agent';
SELECT mesh_release('climb-ok');

-- who may see and call what
SELECT has_table_privilege('mesh_admin', 'mesh.tier_climbs', 'SELECT') AS admin_sees_climbs,
       has_table_privilege('mesh_harness', 'mesh.tier_climbs', 'SELECT') AS harness_sees_climbs,
       has_function_privilege('mesh_harness', 'mesh.tier_climb_on_oom(bigint)', 'EXECUTE') AS harness_can_climb,
       has_function_privilege('mesh_admin', 'mesh.tier_climb_on_release(bigint)', 'EXECUTE') AS admin_can_reset;
SELECT tier_climb_reset_runs FROM mesh.set_policy(tier_climb_reset_runs => 3);
DROP FUNCTION regress.oom_run(text);
DROP FUNCTION regress.clean_run(text);
REVOKE USAGE ON SCHEMA regress FROM contain_harness;
DROP ROLE contain_harness;
