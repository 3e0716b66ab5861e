-- ownership: run ownership is on by default.  A run belongs to the role that
-- declared it, an agent to the role that claimed it (its first run) and the
-- roles an admin granted it to, a snapshot to the owner of the run it was
-- captured from and the roles it was shared with, a background command's
-- progress channel to whoever may read the exec.  Another harness role
-- neither sees nor reaches any of it, and its refusals (42501, with a hint)
-- name nothing it cannot see; the owner's members and mesh_admin do.  An
-- admin may turn it off for a single-tenant install.
CREATE ROLE svc_a IN ROLE mesh_harness;
CREATE ROLE svc_b IN ROLE mesh_harness;
CREATE ROLE svc_a_replica IN ROLE svc_a;
CREATE ROLE own_admin IN ROLE mesh_admin;
CREATE ROLE own_outsider;
GRANT USAGE ON SCHEMA regress TO svc_a, svc_b, own_outsider;
-- what a role that is not the owner was told: nothing of the owner's
CREATE FUNCTION regress.names_owner(message text, hint text) RETURNS boolean LANGUAGE sql AS $$
  SELECT coalesce(message || ' ' || hint, message, '') ~ '(svc_a|tenant-a|agent-a|own-a)'
$$;
GRANT EXECUTE ON FUNCTION regress.names_owner(text, text) TO svc_a, svc_b, own_outsider;

-- on by default
SELECT run_ownership FROM mesh.settings;

------------------------------------------------------------------------------
-- Runs
------------------------------------------------------------------------------
SET ROLE svc_a;
SELECT status, owner_role FROM mesh_acquire('own-a', 'agent-a', 'ann');
SELECT stdout FROM mesh_exec('own-a', ARRAY['echo', 'from a']);
SET ROLE svc_b;
SELECT status FROM mesh_acquire('own-b', 'agent-b', 'bob');
SELECT run_id, owner_role FROM mesh.run_workspaces WHERE run_id LIKE 'own-%' ORDER BY run_id;
SELECT run_id FROM mesh.live_workspaces WHERE run_id LIKE 'own-%' ORDER BY run_id;
SELECT count(*) AS execs_seen FROM mesh.exec_log WHERE run_id = 'own-a';
SELECT count(*) AS spend_rows FROM mesh.spend_by_run WHERE run_id = 'own-a';
-- another service's run does not exist for this one, whatever the call
SELECT * FROM regress.try($$SELECT mesh_exec('own-a', ARRAY['echo', 'from b'])$$);
SELECT * FROM regress.try($$SELECT mesh_read_file('own-a', 'x')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('own-a', 'x', 'from b')$$);
SELECT * FROM regress.try($$SELECT mesh_release('own-a')$$);
-- its run_id stays taken, without saying by whom or for what
SELECT * FROM regress.try($$SELECT mesh_acquire('own-a', 'agent-b', 'ann')$$);
-- a member of the owning role drives the run
SET ROLE svc_a_replica;
SELECT run_id FROM mesh.run_workspaces WHERE run_id LIKE 'own-%' ORDER BY run_id;
SELECT stdout FROM mesh_exec('own-a', ARRAY['echo', 'from a replica']);
-- mesh_admin sees every run
SET ROLE own_admin;
SELECT run_id, owner_role FROM mesh.run_workspaces WHERE run_id LIKE 'own-%' ORDER BY run_id;
SELECT count(*) AS execs_seen FROM mesh.exec_log WHERE run_id = 'own-a';
RESET ROLE;
-- nothing svc_b tried reached the run
SELECT count(*) AS execs, count(*) FILTER (WHERE stdout LIKE 'from b%') AS from_b
  FROM mesh.execs WHERE run_id = 'own-a';

------------------------------------------------------------------------------
-- Agents: claimed by the first role that declares a run under one, given by
-- an admin (always, for an agent holding secrets)
------------------------------------------------------------------------------
SET ROLE svc_b;
-- svc_a claimed agent-a with its first run: svc_b cannot declare under it
SELECT state, message, hint, regress.names_owner(message, hint) AS names_owner
  FROM regress.try($$SELECT mesh_acquire('own-b-on-a', 'agent-a', 'bob')$$);
-- nor use up its concurrency: the refused declarations left nothing
RESET ROLE;
SELECT count(*) AS rows_for_refused FROM mesh.workspaces WHERE run_id = 'own-b-on-a';
SELECT agent_id, role, how FROM mesh.agent_access WHERE agent_id IN ('agent-a', 'agent-b') ORDER BY agent_id;
SELECT kind, detail->>'agent_id' AS agent_id, detail->>'role' AS role FROM mesh.events
 WHERE kind = 'agent_claimed' AND detail->>'agent_id' IN ('agent-a', 'agent-b') ORDER BY id;
-- a member of the claiming role and an admin may declare under it; an admin claims nothing
SET ROLE svc_a_replica;
SELECT status FROM mesh_acquire('own-a-replica', 'agent-a', 'ann');
SET ROLE own_admin;
SELECT status FROM mesh_acquire('own-admin', 'agent-admin', 'root');
RESET ROLE;
SELECT count(*) AS admin_claims FROM mesh.agent_access WHERE agent_id = 'agent-admin';

-- an agent holding secrets is given, never claimed: svc_b cannot read them through it
SELECT mesh.secret_set('agent-a-secret', 'tok', 'own-secret-value-1');
SELECT mesh.environment_set('own-env', '[{"kind": "secret", "name": "tok", "as": "TOK"}]');
SET ROLE svc_b;
SELECT state, message, hint, regress.names_owner(message, hint) AS names_owner
  FROM regress.try($$SELECT mesh_acquire('own-b-secret', 'agent-a-secret', 'bob', environment => 'own-env')$$);
-- the environment is anyone's, its secrets resolve only through the run's own agent
SELECT state, message, regress.names_owner(message, hint) AS names_owner
  FROM regress.try($$SELECT mesh_acquire('own-b-env', 'agent-b', 'bob', environment => 'own-env')$$);
RESET ROLE;
SELECT mesh.agent_grant('agent-a-secret', 'svc_a');
SET ROLE svc_a;
SELECT status FROM mesh_acquire('own-a-secret', 'agent-a-secret', 'ann', environment => 'own-env');
SELECT stdout FROM mesh_exec('own-a-secret', ARRAY['sh', '-c', 'test "$TOK" = own-secret-value-1 && echo delivered']);
SET ROLE svc_b;
SELECT state FROM regress.try($$SELECT mesh_acquire('own-b-secret', 'agent-a-secret', 'bob', environment => 'own-env')$$);
-- granted, then revoked: its live run loses the secret at once, its next declaration is refused
RESET ROLE;
SELECT mesh.agent_grant('agent-a-secret', 'svc_b');
SET ROLE svc_b;
SELECT status FROM mesh_acquire('own-b-secret', 'agent-a-secret', 'bob', environment => 'own-env');
SELECT stdout FROM mesh_exec('own-b-secret', ARRAY['sh', '-c', 'test "$TOK" = own-secret-value-1 && echo delivered']);
RESET ROLE;
SELECT mesh.agent_revoke('agent-a-secret', 'svc_b');
SELECT agent_id, role, how FROM mesh.agent_access WHERE agent_id = 'agent-a-secret' ORDER BY role::text;
SELECT kind, name, revoked_reason FROM mesh.run_grants('own-b-secret');
SELECT kind, name, revoked_at IS NULL AS live FROM mesh.run_grants('own-a-secret');
SET ROLE svc_b;
SELECT stdout FROM mesh_exec('own-b-secret', ARRAY['sh', '-c', 'echo "${TOK:-no secret}"']);
SELECT state FROM regress.try($$SELECT mesh_acquire('own-b-secret-2', 'agent-a-secret', 'bob', environment => 'own-env')$$);
SELECT mesh_release('own-b-secret');
RESET ROLE;
-- grant and revoke are an admin's, and refuse what they cannot do
SET ROLE svc_a;
SELECT state FROM regress.try($$SELECT mesh.agent_grant('agent-a', 'svc_b')$$);
RESET ROLE;
SELECT * FROM regress.try($$SELECT mesh.agent_revoke('agent-a', 'svc_b')$$);
SELECT * FROM regress.try($$SELECT mesh.agent_grant(NULL, 'svc_b')$$);

------------------------------------------------------------------------------
-- Snapshots: owned, never found by another owner's id or project name
------------------------------------------------------------------------------
SET client_min_messages = warning;  -- set-up NOTICEs carry random ids and ages
SET ROLE svc_a;
SELECT status FROM mesh_acquire('own-a-proj', 'agent-a', 'ann', project => 'tenant-a/app');
SELECT exit_code FROM mesh_exec('own-a-proj', ARRAY['sh', '-c', 'echo a-private > state.txt']);
SELECT id AS snap_a FROM mesh_snapshot('own-a-proj') \gset
SELECT owner_role, project, current FROM mesh.project_snapshots WHERE snapshot_id = :snap_a;
SET ROLE svc_b;
-- not listed, and by id the same refusal as an id that does not exist
SELECT count(*) AS seen FROM mesh.project_snapshots WHERE project = 'tenant-a/app' OR snapshot_id = :snap_a;
SELECT state, replace(message, :'snap_a', '<id>') AS message, regress.names_owner(message, hint) AS names_owner
  FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, from_snapshot => %s)', 'own-b-fork', 'agent-b', 'bob', :snap_a));
SELECT state, replace(message, (:snap_a + 1)::text, '<id>') AS message
  FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, from_snapshot => %s)', 'own-b-fork', 'agent-b', 'bob', :snap_a + 1));
SELECT state, regress.names_owner(message, hint) AS names_owner
  FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, project => %L, from_snapshot => %s)', 'own-b-fork', 'agent-b', 'bob', 'x/y', :snap_a));
-- nor can it share the snapshot with itself: not through the API, the shares' view or the table
SELECT state, replace(message, :'snap_a', '<id>') AS message
  FROM regress.try(format('SELECT mesh_snapshot_share(%s, %L)', :snap_a, 'svc_b'));
SELECT state, message FROM regress.try(format('INSERT INTO mesh.snapshot_shares_owned (snapshot_id, role_oid) VALUES (%s, %L)', :snap_a, 'svc_b'));
SELECT state, message FROM regress.try(format('INSERT INTO mesh.snapshot_shares (snapshot_id, role_oid) VALUES (%s, %L)', :snap_a, 'svc_b'));
SELECT count(*) AS seen FROM mesh.project_snapshots WHERE snapshot_id = :snap_a;
-- the same project name: svc_b's run starts empty, svc_a's state is not in it
SELECT status FROM mesh_acquire('own-b-proj', 'agent-b', 'bob', project => 'tenant-a/app');
SELECT stdout FROM mesh_exec('own-b-proj', ARRAY['sh', '-c', 'cat state.txt 2>/dev/null || echo empty']);
-- ids are random, not a sequence: nothing to count through
RESET ROLE;
SELECT pg_get_serial_sequence('mesh.snapshots', 'id') IS NULL AS no_sequence,
       (SELECT count(*) FROM mesh.snapshots WHERE id BETWEEN :snap_a - 1000 AND :snap_a + 1000) AS ids_near;
-- sharing is the owner's: svc_b may then start from it, by project and by id
SET ROLE svc_a;
SELECT mesh_snapshot_share(:snap_a, 'svc_b');
SET ROLE svc_b;
SELECT owner_role, current FROM mesh.project_snapshots WHERE snapshot_id = :snap_a;
SELECT state, replace(message, :'snap_a', '<id>') AS message
  FROM regress.try(format('SELECT mesh_snapshot_share(%s, %L)', :snap_a, 'own_outsider'));
SELECT status FROM mesh_acquire('own-b-proj-2', 'agent-b', 'bob', project => 'tenant-a/app');
SELECT stdout FROM mesh_exec('own-b-proj-2', ARRAY['sh', '-c', 'cat state.txt; echo b-private > state.txt']);
SELECT project FROM mesh_acquire('own-b-fork', 'agent-b', 'bob', from_snapshot => :snap_a);
SELECT stdout FROM mesh_exec('own-b-fork', ARRAY['cat', 'state.txt']);
-- svc_b's capture is its own current snapshot of the project: svc_a's stays current
SELECT status FROM mesh_snapshot('own-b-proj-2');
RESET ROLE;
SELECT owner_role, status FROM mesh.snapshots WHERE project = 'tenant-a/app' ORDER BY owner_role::text;
SET ROLE svc_a;
SELECT status FROM mesh_acquire('own-a-proj-2', 'agent-a', 'ann', project => 'tenant-a/app');
SELECT stdout FROM mesh_exec('own-a-proj-2', ARRAY['cat', 'state.txt']);
-- and its own comes before the one shared with it
SET ROLE svc_b;
SELECT status FROM mesh_acquire('own-b-proj-3', 'agent-b', 'bob', project => 'tenant-a/app');
SELECT stdout FROM mesh_exec('own-b-proj-3', ARRAY['cat', 'state.txt']);
-- a run declared while shared, materialized after the share ended: refused
SELECT project FROM mesh_acquire('own-b-late', 'agent-b', 'bob', from_snapshot => :snap_a);
-- nor end another role's share of it
SELECT count(*) AS shares_seen FROM mesh.snapshot_shares_owned WHERE snapshot_id = :snap_a;
DELETE FROM mesh.snapshot_shares_owned WHERE snapshot_id = :snap_a;
SET ROLE svc_a;
SELECT role_oid FROM mesh.snapshot_shares_owned WHERE snapshot_id = :snap_a ORDER BY role_oid::text;
SELECT mesh_snapshot_unshare(:snap_a, 'svc_b');
SELECT state, replace(message, :'snap_a', '<id>') AS message
  FROM regress.try(format('SELECT mesh_snapshot_unshare(%s, %L)', :snap_a, 'svc_b'));
SET ROLE svc_b;
SELECT state, replace(message, :'snap_a', '<id>') AS message, regress.names_owner(message, hint) AS names_owner
  FROM regress.try($$SELECT mesh_exec('own-b-late', ARRAY['cat', 'state.txt'])$$);
SELECT state FROM regress.try(format('SELECT mesh_acquire(%L, %L, %L, from_snapshot => %s)', 'own-b-fork-2', 'agent-b', 'bob', :snap_a));
SELECT count(*) AS seen FROM mesh.project_snapshots WHERE snapshot_id = :snap_a;
SELECT state, replace(message, :'snap_a', '<id>') AS message
  FROM regress.try(format('SELECT mesh_snapshot_unshare(%s, %L)', :snap_a, 'svc_b'));
RESET ROLE;
RESET client_min_messages;

------------------------------------------------------------------------------
-- Progress channels: named for the exec's readers only
------------------------------------------------------------------------------
SET ROLE svc_a;
SELECT mesh_exec_start('own-a', ARRAY['true']) AS bg_a \gset
SELECT mesh_exec_channel(:bg_a) ~ ('^mesh_exec_' || :bg_a || '_[0-9a-f]{32}$') AS channel_has_random_key;
SELECT status FROM mesh_exec_wait(:bg_a);
SET ROLE svc_b;
SELECT state, replace(message, :'bg_a', '<id>') AS message FROM regress.try(format('SELECT mesh_exec_channel(%s)', :bg_a));
SET ROLE own_outsider;
SELECT state, replace(message, :'bg_a', '<id>') AS message FROM regress.try(format('SELECT mesh_exec_channel(%s)', :bg_a));
RESET ROLE;
SELECT count(DISTINCT notify_key) = count(*) AS keys_distinct FROM mesh.execs;

------------------------------------------------------------------------------
-- Off, for a single-tenant install: every harness role shares everything
------------------------------------------------------------------------------
SELECT run_ownership FROM mesh.set_policy(run_ownership => false);
SET ROLE svc_b;
SELECT count(*) AS execs_seen FROM mesh.exec_log WHERE run_id = 'own-a';
SELECT status FROM mesh_acquire('own-b-on-a', 'agent-a', 'bob');
SELECT mesh_release('own-a');
SELECT mesh_release('own-b-on-a');
RESET ROLE;
SELECT run_ownership FROM mesh.set_policy(run_ownership => true);
SELECT run_id, mesh_release(run_id) FROM mesh.workspaces
 WHERE run_id LIKE 'own-%' AND status NOT IN ('released', 'failed') ORDER BY run_id;
REVOKE USAGE ON SCHEMA regress FROM svc_a, svc_b, own_outsider;
DROP FUNCTION regress.names_owner(text, text);
DROP ROLE svc_a_replica;
DROP ROLE svc_a;
DROP ROLE svc_b;
DROP ROLE own_admin;
DROP ROLE own_outsider;
