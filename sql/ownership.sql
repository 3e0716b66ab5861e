-- ownership: with mesh.set_policy(run_ownership => true) a run belongs to
-- the role that declared it.  Another harness role neither sees it in the
-- views nor drives it (to that role it does not exist), so several harness
-- services share one database; the owner's members and mesh_admin do.  Off
-- (the default), every harness role sees and drives every run.
CREATE ROLE svc_a IN ROLE mesh_harness;
CREATE ROLE svc_b IN ROLE mesh_harness;
CREATE ROLE svc_a_replica IN ROLE svc_a;
CREATE ROLE own_admin IN ROLE mesh_admin;
GRANT USAGE ON SCHEMA regress TO svc_b;

-- off, the default
SELECT run_ownership FROM mesh.settings;
SET ROLE svc_a;
SELECT status, owner_role FROM mesh_acquire('own-shared', 'agent-o', 'ann');
SET ROLE svc_b;
SELECT run_id, owner_role FROM mesh.run_workspaces WHERE run_id = 'own-shared';
SELECT mesh_release('own-shared');
RESET ROLE;

-- on
SELECT run_ownership FROM mesh.set_policy(run_ownership => true);
SET ROLE svc_a;
SELECT status FROM mesh_acquire('own-a', 'agent-o', 'ann');
SELECT stdout FROM mesh_exec('own-a', ARRAY['echo', 'from a']);
SET ROLE svc_b;
SELECT status FROM mesh_acquire('own-b', 'agent-o', 'bob');
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
SELECT * FROM regress.try($$SELECT mesh_acquire('own-a', 'agent-o', 'ann')$$);
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

-- off again: shared as before
SELECT run_ownership FROM mesh.set_policy(run_ownership => false);
SET ROLE svc_b;
SELECT count(*) AS execs_seen FROM mesh.exec_log WHERE run_id = 'own-a';
SELECT mesh_release('own-a');
SELECT mesh_release('own-b');
RESET ROLE;
REVOKE USAGE ON SCHEMA regress FROM svc_b;
DROP ROLE svc_a_replica;
DROP ROLE svc_a;
DROP ROLE svc_b;
DROP ROLE own_admin;
