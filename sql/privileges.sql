-- privileges: PUBLIC gets nothing, the harness calls the API and reads views,
-- credentials are readable by nobody through SQL.
\set ON_ERROR_STOP 0
DROP ROLE IF EXISTS harness_user;
DROP ROLE IF EXISTS admin_user;
DROP ROLE IF EXISTS nobody_user;
CREATE ROLE harness_user LOGIN IN ROLE mesh_harness;
CREATE ROLE admin_user LOGIN IN ROLE mesh_admin;
CREATE ROLE nobody_user LOGIN;

SET ROLE admin_user;
SELECT mesh.backend_add('remote-a', 'sandboxd', '{"url": "http://127.0.0.1:1"}', enabled => false, catalog_order => 50);
SELECT mesh.backend_set_credential('remote-a', 'sekrit-token-123');
SELECT name, enabled, has_credential FROM mesh.backend_catalog WHERE name = 'remote-a';
SELECT * FROM mesh.backend_credentials;
-- bad configs name the field
SELECT mesh.backend_add('bad', 'sandboxd', '{"url": "ftp://x"}');
SELECT mesh.backend_add('bad', 'sandboxd', '{"url": "http://u:p@host"}');
SELECT mesh.backend_add('bad', 'nosuchdriver', '{}');
SELECT mesh.backend_add('bad', 'sandboxd', '{}');
-- pins only to enabled backends
SELECT mesh.agent_set('pinned-agent', 'remote-a');
SELECT mesh.backend_enable('remote-a');
SELECT mesh.agent_set('pinned-agent', 'remote-a');
SELECT mesh.backend_disable('remote-a');
SELECT agent_id, backend FROM mesh.agents WHERE agent_id = 'pinned-agent';
RESET ROLE;

SET ROLE harness_user;
SELECT status FROM mesh_acquire('priv-run', 'agent-p', 'frank');
SELECT run_id, status FROM mesh.run_workspaces WHERE run_id = 'priv-run';
SELECT count(*) FROM mesh.workspaces;
SELECT count(*) FROM mesh.backend_credentials;
SELECT count(*) FROM mesh.backends;
SELECT mesh.backend_add('sneaky', 'sandboxd', '{"socket": "/tmp/x"}');
SELECT mesh.backend_set_credential('remote-a', 'stolen');
SELECT mesh_release('priv-run');
RESET ROLE;

SET ROLE nobody_user;
SELECT mesh_acquire('nobody-run', 'a', 'b');
SELECT count(*) FROM mesh.run_workspaces;
RESET ROLE;

-- the credential never appears in a view, an event or an error
SELECT count(*) AS leaks FROM mesh.events WHERE detail::text LIKE '%sekrit%';
SELECT count(*) AS leaks FROM mesh.backend_catalog WHERE config::text LIKE '%sekrit%';
RESET ROLE;
DROP ROLE harness_user;
DROP ROLE admin_user;
DROP ROLE nobody_user;
