-- test/pgtap/selection.sql: which enabled backend a new workspace uses, and the admin boundary.
-- (Runs in a rolled-back transaction: it only reads what mesh.select_backend decides.)
BEGIN;
SELECT plan(10);

SELECT mesh.backend_add('sel-a', 'sandboxd', '{"socket": "/tmp/sel-a.sock"}', catalog_order => 5, max_size => 'large');
SELECT mesh.backend_add('sel-b', 'sandboxd', '{"socket": "/tmp/sel-b.sock"}', catalog_order => 7, max_size => 'small');

SELECT is((SELECT backend FROM mesh.select_backend('unpinned')), 'local', 'unpinned: first enabled in catalog order');
SELECT is((SELECT implicit FROM mesh.select_backend('unpinned')), true, 'with several enabled, the choice is implicit (and logged)');
SELECT mesh.backend_set_order('local', 9);
SELECT is((SELECT backend FROM mesh.select_backend('unpinned')), 'sel-a', 'catalog order decides the default');

SELECT mesh.agent_set('pinned', 'sel-b', default_size => 'xlarge');
SELECT is((SELECT backend FROM mesh.select_backend('pinned')), 'sel-b', 'a pin wins');
SELECT is((SELECT size FROM mesh.select_backend('pinned')), 'small'::mesh.size_tier, 'the tier is clamped to the backend ceiling');
SELECT is((SELECT mesh.backend_disable('sel-b')), ARRAY['pinned'], 'disabling reports the agents it un-pinned');
SELECT is((SELECT backend FROM mesh.agents WHERE agent_id = 'pinned'), NULL, 'the pin is gone');
SELECT throws_ok($$SELECT mesh.agent_set('pinned', 'sel-b')$$, '55000', NULL, 'a pin to a disabled backend is refused');

-- a pin that survived (direct edit) to a disabled backend is refused, never falls through
UPDATE mesh.agents SET backend = 'sel-b' WHERE agent_id = 'pinned';
SELECT throws_ok($$SELECT * FROM mesh.select_backend('pinned')$$, '55000', NULL, 'a stale pin is refused, not silently replaced');
UPDATE mesh.backends SET enabled = false;
SELECT throws_ok($$SELECT * FROM mesh.select_backend('unpinned')$$, '55000', 'no backend is enabled', 'no enabled backend is a clear error');

SELECT * FROM finish();
ROLLBACK;
