-- test/pgtap/schema.sql: the data model and privileges the design requires (DESIGN §3).
BEGIN;
SELECT plan(26);

SELECT has_schema('mesh');
SELECT has_table('mesh', t, 'table mesh.' || t) FROM unnest(ARRAY['backends', 'backend_credentials', 'agents', 'workspaces', 'execs', 'events']) t;
SELECT col_is_unique('mesh', 'workspaces', 'run_id', 'one workspace per run');
SELECT col_not_null('mesh', 'workspaces', 'created_by_actor_id', 'every workspace records its actor');
SELECT col_type_is('mesh', 'workspaces', 'status', 'mesh.workspace_status', 'status is a closed state machine');
SELECT enum_has_labels('mesh', 'workspace_status', ARRAY['pending', 'acquiring', 'ready', 'releasing', 'released', 'failed']);
SELECT enum_has_labels('mesh', 'size_tier', ARRAY['small', 'standard', 'large', 'xlarge']);
SELECT enum_has_labels('mesh', 'exec_status', ARRAY['running', 'ok', 'timeout', 'cancelled', 'oom', 'budget_exhausted', 'error', 'killed']);
SELECT has_index('mesh', 'workspaces', 'workspaces_live_idx', 'the reaper finds live workspaces by index');
SELECT has_index('mesh', 'execs', 'execs_running_idx', 'running execs are found by index');

-- PUBLIC has nothing
SELECT ok(NOT has_table_privilege('public', 'mesh.' || t, 'SELECT'), 'PUBLIC cannot read mesh.' || t)
  FROM unnest(ARRAY['workspaces', 'execs', 'backend_credentials']) t;
SELECT ok(NOT has_function_privilege('public', 'mesh_exec(text, text[], text, bytea, interval, jsonb)', 'EXECUTE'),
          'PUBLIC cannot call mesh_exec');
-- the harness calls the API and reads its views, nothing else
SELECT ok(has_function_privilege('mesh_harness', 'mesh_exec(text, text[], text, bytea, interval, jsonb)', 'EXECUTE'),
          'the harness can call mesh_exec');
SELECT ok(has_table_privilege('mesh_harness', 'mesh.exec_log', 'SELECT'), 'the harness reads mesh.exec_log');
SELECT ok(NOT has_table_privilege('mesh_harness', 'mesh.workspaces', 'INSERT'), 'the harness cannot write workspaces');
SELECT ok(NOT has_table_privilege('mesh_harness', 'mesh.backend_credentials', 'SELECT'), 'the harness cannot read credentials');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.backend_add(text, text, jsonb, boolean, integer, mesh.size_tier)', 'EXECUTE'),
          'the harness cannot configure backends');
-- the admin configures but cannot read credentials back
SELECT ok(has_function_privilege('mesh_admin', 'mesh.backend_set_credential(text, text)', 'EXECUTE'), 'the admin sets credentials');
SELECT ok(NOT has_table_privilege('mesh_admin', 'mesh.backend_credentials', 'SELECT'), 'the admin cannot read credentials back');

SELECT * FROM finish();
ROLLBACK;
