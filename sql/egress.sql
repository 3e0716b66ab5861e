-- egress: the workspace network policy (open or allowlist), captured per
-- workspace at creation, enforced by the embedded daemon's proxy, refusals
-- recorded as events; incapable backends refused or accepted by policy.
-- No traffic leaves the machine: every request below is refused by the proxy
-- before any name is resolved or any connection made.
\set ON_ERROR_STOP 0

-- no saved policy: open
SELECT mesh.egress_policy() - 'default_domains';
SELECT mesh.egress_policy()->'default_domains' @> '["github.com", "pypi.org", "registry.npmjs.org"]' AS has_defaults;
-- new writes must name the mode; every field is checked
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"domains": ["example.com"]}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "closed"}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "allowlist", "domains": ["a.*.example.com"]}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "allowlist", "domains": ["10.0.0.1"]}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "allowlist", "domains": "example.com"}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "allowlist", "uncontrolled": "maybe"}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('{"mode": "allowlist", "proxy": "x"}')$$);
SELECT * FROM regress.try($$SELECT mesh.set_egress_policy('"allowlist"')$$);
-- a valid allowlist: defaults to refusing incapable backends
SELECT mesh.set_egress_policy('{"mode": "allowlist", "domains": ["*.example.com", "api.test.dev"]}') - 'default_domains';
SELECT kind, detail FROM mesh.events WHERE kind = 'egress_policy_set' ORDER BY id DESC LIMIT 1;

-- a workspace on the embedded daemon (egress_control) gets the allowlist: defaults + operator domains
SELECT status FROM mesh_acquire('egress-1', 'netagent', 'grace');
SELECT exit_code FROM mesh_exec('egress-1', ARRAY['true']);
SELECT n->>'mode' AS mode, n->>'enforced' AS enforced, n->'domains' @> '["*.example.com", "api.test.dev", "github.com"]' AS domains,
       n->>'backend' AS backend
  FROM mesh.run_network('egress-1') n;
-- a domain off the list, a raw IP and a wildcard apex: refused by the proxy (403) and recorded
SELECT exit_code, stdout FROM mesh_exec('egress-1', ARRAY['curl', '-s', '-m', '5', '-o', '/dev/null', '-w', '%{http_code}', 'http://not-listed.invalid/']);
SELECT exit_code, stdout FROM mesh_exec('egress-1', ARRAY['curl', '-s', '-m', '5', '-o', '/dev/null', '-w', '%{http_code}', '--proxytunnel', 'https://192.0.2.1/']);
SELECT exit_code, stdout FROM mesh_exec('egress-1', ARRAY['curl', '-s', '-m', '5', '-o', '/dev/null', '-w', '%{http_code}', 'http://example.com:8080/']);
SELECT e.kind, e.backend, e.detail->>'host' AS host, e.detail->>'port' AS port, e.detail->>'reason' AS reason,
       e.workspace_id = w.id AS workspace, (e.detail->>'exec_id')::bigint IN (SELECT id FROM mesh.execs x WHERE x.run_id = 'egress-1') AS exec,
       e.detail->>'at' IS NOT NULL AS has_time
  FROM mesh.events e JOIN mesh.workspaces w ON w.run_id = e.run_id
 WHERE e.run_id = 'egress-1' AND e.kind = 'egress_denied' ORDER BY e.id;
-- without the proxy there is no route out (the host's PostgreSQL port included)
SELECT stdout FROM mesh_exec('egress-1', ARRAY['sh', '-c', 'curl -s -m 3 --noproxy "*" -o /dev/null -w "%{http_code}" http://127.0.0.1:' || current_setting('port') || '/']);

-- a policy change affects new workspaces only
SELECT mesh.set_egress_policy('{"mode": "open"}') - 'default_domains';
SELECT exit_code, stdout FROM mesh_exec('egress-1', ARRAY['curl', '-s', '-m', '5', '-o', '/dev/null', '-w', '%{http_code}', 'http://not-listed.invalid/']);
SELECT count(*) AS denials FROM mesh.events WHERE run_id = 'egress-1' AND kind = 'egress_denied';
SELECT mesh.run_network('egress-1')->>'mode' AS still;
SELECT status FROM mesh_acquire('egress-2', 'netagent', 'grace');
SELECT exit_code FROM mesh_exec('egress-2', ARRAY['true']);
SELECT n->>'mode' AS mode, n->>'policy_mode' AS policy, n->>'enforced' AS enforced FROM mesh.run_network('egress-2') n;
-- open mode: still no host loopback or private destination
SELECT stdout FROM mesh_exec('egress-2', ARRAY['curl', '-s', '-m', '5', '--noproxy', '', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:5432/']);
SELECT stdout FROM mesh_exec('egress-2', ARRAY['curl', '-s', '-m', '5', '--noproxy', '', '-o', '/dev/null', '-w', '%{http_code}', 'http://localhost:5432/']);
SELECT detail->>'host' AS host, detail->>'reason' AS reason FROM mesh.events WHERE run_id = 'egress-2' AND kind = 'egress_denied';
-- back to an allowlist for the incapable-backend cases
SELECT mesh.set_egress_policy('{"mode": "allowlist"}') - 'default_domains';
SELECT mesh_release('egress-1');
SELECT mesh_release('egress-2');

-- a backend that cannot enforce egress (declared so): refused before any sandbox exists...
SELECT mesh.backend_add('nocap', 'sandboxd', '{"embedded": true, "egress_control": false}', enabled => true, catalog_order => 5);
SELECT mesh.agent_set('pinned', backend => 'nocap');
SELECT status FROM mesh_acquire('egress-3', 'pinned', 'grace');
SELECT * FROM regress.try($$SELECT mesh_exec('egress-3', ARRAY['true'])$$);
SELECT status, backend_kind, external_ref, egress FROM mesh.workspaces WHERE run_id = 'egress-3';
-- ...or, when the operator accepts it, open egress recorded as such
SELECT mesh.set_egress_policy('{"mode": "allowlist", "uncontrolled": "allow"}') - 'default_domains';
SELECT exit_code FROM mesh_exec('egress-3', ARRAY['true']);
SELECT n->>'mode' AS mode, n->>'policy_mode' AS policy, n->>'enforced' AS enforced, n->>'uncontrolled' AS uncontrolled
  FROM mesh.run_network('egress-3') n;
-- (this daemon was sent network "none": no proxy in that sandbox)
SELECT stdout FROM mesh_exec('egress-3', ARRAY['sh', '-c', 'echo "[$HTTP_PROXY]"']);
SELECT mesh_release('egress-3');
SELECT mesh.agent_set('pinned', backend => NULL);
SELECT mesh.backend_disable('nocap');

-- a policy saved as a row (an upgrade from 0.1 names the mode of rows that lacked one)
UPDATE mesh.egress_settings SET policy = '{"mode": "allowlist", "domains": ["legacy.example.org"]}';
SELECT mesh.egress_policy() - 'default_domains';
SELECT status FROM mesh_acquire('egress-4', 'netagent', 'grace');
SELECT exit_code FROM mesh_exec('egress-4', ARRAY['true']);
SELECT n->>'mode' AS mode, n->'domains' ? 'legacy.example.org' AS has_legacy FROM mesh.run_network('egress-4') n;
SELECT mesh_release('egress-4');
-- a malformed saved policy fails acquisition (never widens), clearly
UPDATE mesh.egress_settings SET policy = '{"mode": "sometimes"}';
SELECT * FROM regress.try($$SELECT mesh.egress_policy()$$);
SELECT status FROM mesh_acquire('egress-5', 'netagent', 'grace');
SELECT * FROM regress.try($$SELECT mesh_exec('egress-5', ARRAY['true'])$$);
SELECT status, backend_kind, egress FROM mesh.workspaces WHERE run_id = 'egress-5';
-- its owner switches to open explicitly; the pending run then proceeds
SELECT mesh.set_egress_policy('{"mode": "open"}') - 'default_domains';
SELECT exit_code FROM mesh_exec('egress-5', ARRAY['true']);
SELECT mesh_release('egress-5');

-- the harness can neither read nor write the policy
SET ROLE mesh_harness;
SELECT mesh.egress_policy();
SELECT mesh.set_egress_policy('{"mode": "open"}');
RESET ROLE;
-- back to the install default
DELETE FROM mesh.egress_settings;
SELECT mesh.egress_policy() - 'default_domains';
