-- test/pgtap/capabilities.sql: a capability the workspace row does not record counts as absent
-- (invariant 6, docs/design.md).  The rows the worker reads are committed, so this file cleans
-- up after itself instead of running in a rolled-back transaction.
SELECT plan(4);

SELECT mesh_acquire('pgtap-caps-1', 'pgtap-caps', 'pgtap');
SELECT is((SELECT exit_code FROM mesh_exec('pgtap-caps-1', ARRAY['true'])), 0,
          'a materialized workspace records its capabilities and runs commands');

-- An operator's edit (or a row from before capabilities were recorded) leaves none.
UPDATE mesh.workspaces SET capabilities = NULL WHERE run_id = 'pgtap-caps-1';
SELECT throws_like($$SELECT * FROM mesh_exec('pgtap-caps-1', ARRAY['true'])$$,
                   '%does not declare the shell capability%',
                   'no recorded capabilities: exec is refused, not assumed allowed');

UPDATE mesh.workspaces SET capabilities = '{"shell": false}' WHERE run_id = 'pgtap-caps-1';
SELECT throws_like($$SELECT * FROM mesh_exec('pgtap-caps-1', ARRAY['true'])$$,
                   '%does not declare the shell capability%',
                   'shell declared false: exec is refused');

SELECT is(mesh_release('pgtap-caps-1', 'pgtap done'), 'destroyed',
          'the workspace is still released by its row');

SELECT * FROM finish();
