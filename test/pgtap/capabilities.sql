-- test/pgtap/capabilities.sql: a capability the workspace row does not record counts as absent
-- (invariant 6, docs/design.md).  The rows the worker reads are committed, so this file cleans
-- up after itself instead of running in a rolled-back transaction.
SELECT plan(9);

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

-- The catalog shows what each backend declares, read from its driver without any backend call
-- (an isolate backend whose host does not exist: nothing answers, nothing is asked).
SELECT mesh.backend_add('pgtap-caps-iso', 'isolate', '{"url": "http://127.0.0.1:9"}', enabled => false);
SELECT is((SELECT capabilities->>'shell' || '/' || (capabilities->>'eval') FROM mesh.backend_catalog WHERE name = 'pgtap-caps-iso'),
          'false/true', 'the catalog shows an isolate backend declares eval and no shell');
SELECT is((SELECT capabilities->>'shell' FROM mesh.backend_catalog WHERE name = 'local'), 'true',
          'and the embedded daemon declares shell');
SELECT is((SELECT capabilities->>'extend_timeout' FROM mesh.backend_catalog WHERE name = 'local'), 'true',
          'the embedded daemon declares extend_timeout (mesh_exec_extend)');
SELECT is((SELECT capabilities->>'extend_timeout' FROM mesh.backend_catalog WHERE name = 'pgtap-caps-iso'), 'false',
          'an isolate backend does not');
SELECT is(mesh.driver_capabilities('no-such-driver', '{}'), NULL, 'a driver this build does not have declares nothing');
DELETE FROM mesh.backends WHERE name = 'pgtap-caps-iso';

SELECT * FROM finish();
