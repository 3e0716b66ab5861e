-- test/pgtap/repositories.sql: repository providers, their write-only credentials, repository
-- grants, the token rows workers record (issue 31), what a run could see of them, and who may
-- read what.  Rows are made directly here (as the workers would) and everything is rolled back.
BEGIN;
SELECT plan(39);

SELECT has_table('mesh', 'repository_providers', 'table mesh.repository_providers');
SELECT has_table('mesh', 'repository_provider_credentials', 'table mesh.repository_provider_credentials');
SELECT has_table('mesh', 'repositories', 'table mesh.repositories');
SELECT has_table('mesh', 'repository_tokens', 'table mesh.repository_tokens');

-- providers
SELECT throws_ok($$SELECT mesh.repository_provider_set('gh', 'github', 'github.com', 'https://x:secret@api.github.com', '1', '2')$$,
                 '22023', NULL, 'an api_url carrying credentials is refused');
SELECT throws_ok($$SELECT mesh.repository_provider_set('gh', 'github', 'github.com', 'https://api.github.com')$$,
                 '23514', NULL, 'a GitHub provider needs an App id and an installation');
SELECT throws_ok($$SELECT mesh.repository_provider_set('gh', 'bitbucket', 'bitbucket.org', 'https://api.bitbucket.org', '1', '2')$$,
                 '23514', NULL, 'an unknown provider kind is refused');
SELECT lives_ok($$SELECT mesh.repository_provider_set('gh', 'github', 'github.com', 'https://api.github.com', '4242', '77')$$,
                'a GitHub App installation is named');
SELECT throws_ok($$SELECT mesh.repository_provider_set_credential('nope', 'k')$$, '42704', NULL,
                 'a credential for an unknown provider is refused');
SELECT is(mesh.repository_provider_set_credential('gh', '-----BEGIN PRIVATE KEY-----first'), 1, 'the first key is version 1');

-- repositories and grants
SELECT throws_ok($$SELECT mesh.repository_register('octo/widgets', 'gh', '{"contents": "admin"}')$$, '22023', NULL,
                 'a permission level other than read/write is refused');
SELECT throws_ok($$SELECT mesh.repository_register('octo/widgets', 'nope')$$, '42704', NULL, 'an unknown provider is refused');
SELECT throws_ok($$SELECT mesh.repository_register('octo/..', 'gh')$$, '23514', NULL, 'a repository named .. is refused');
SELECT lives_ok($$SELECT mesh.repository_register('octo/widgets', 'gh', '{"contents": "write", "pull_requests": "read"}')$$,
                'a repository is registered with its ceiling');
INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, external_ref)
VALUES ('repo-run-a', 'ag', 'alice', 'ready', 'ref-a'), ('repo-run-b', 'ag', 'bob', 'ready', 'ref-b');
SELECT throws_ok($$SELECT mesh.repository_grant('repo-run-a', 'octo/secret')$$, '42704', NULL,
                 'an unregistered repository cannot be granted');
SELECT throws_ok($$SELECT mesh.repository_grant('repo-run-a', 'octo/widgets', '{"pull_requests": "write"}')$$, '42501', NULL,
                 'a grant beyond the repository''s ceiling is refused');
SELECT throws_ok($$SELECT mesh.repository_grant('repo-run-a', 'octo/widgets', '{"issues": "read"}')$$, '42501', NULL,
                 'a permission the ceiling does not name is refused');
SELECT lives_ok($$SELECT mesh.repository_grant('repo-run-a', 'octo/widgets', '{"contents": "write"}')$$,
                'a grant within the ceiling is made');
SELECT results_eq($$SELECT kind, name, scope::jsonb FROM mesh.run_grants('repo-run-a')$$,
                  $$VALUES ('repository', 'octo/widgets', '{"contents": "write"}'::jsonb)$$,
                  '"what could this run see" shows the repository grant');

-- token rows (as a worker records them)
SELECT ok(mesh.repository_token_minted('repo-run-a', 'octo/widgets', 'ghs_AAA', now() + interval '3 hours',
                                       '{"contents": "write"}', 1) > 0, 'a minted token is a row');
SELECT ok((SELECT expires_at <= now() + interval '1 hour' FROM mesh.repository_tokens WHERE token = 'ghs_AAA'),
          'its expiry is capped to the hour whatever the provider said');
SELECT is((SELECT actor_id FROM mesh.repository_tokens WHERE token = 'ghs_AAA'), 'alice', 'it names the run''s actor');
SELECT isnt_empty($$SELECT 1 FROM mesh.events WHERE kind = 'repository_token_minted' AND run_id = 'repo-run-a'$$,
                  'minting is an event');
SELECT ok(NOT EXISTS (SELECT 1 FROM mesh.events WHERE detail::text LIKE '%ghs_AAA%' OR detail::text LIKE '%BEGIN PRIVATE%'),
          'no event holds a token or a key');
SELECT results_eq($$SELECT repository, host, live FROM mesh.run_repository_tokens('repo-run-a')$$,
                  $$VALUES ('octo/widgets', 'github.com', true)$$, 'the run''s tokens are listed, live');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_proc p, unnest(p.proargnames) a
                       WHERE p.oid = 'mesh.run_repository_tokens(text)'::regprocedure AND a = 'token'),
          'the listing has no column for a token''s value');

-- rotation invalidates the live tokens of the old key; release revokes the rest
SELECT mesh.repository_token_minted('repo-run-b', 'octo/widgets', 'ghs_BBB', now() + interval '1 hour', '{"contents": "read"}', 1);
SELECT is(mesh.repository_provider_set_credential('gh', '-----BEGIN PRIVATE KEY-----second'), 2, 'a second key is a rotation');
SELECT results_eq($$SELECT count(*)::int FROM mesh.repository_tokens WHERE revoked_at IS NOT NULL AND revoke_outcome = 'pending'$$,
                  ARRAY[2], 'the rotation invalidated both live tokens: revocation at the provider pending');
SELECT mesh.repository_token_revoked(id, 'revoked') FROM mesh.repository_tokens WHERE run_id = 'repo-run-b';
SELECT is((SELECT revoke_outcome || ' ' || (token IS NULL) FROM mesh.repository_tokens WHERE run_id = 'repo-run-b'), 'revoked true',
          'the provider''s answer to a revocation is recorded, the value wiped');
SELECT mesh.repository_token_minted('repo-run-a', 'octo/widgets', 'ghs_CCC', now() + interval '1 hour', '{"contents": "write"}', 2);
UPDATE mesh.workspaces SET status = 'released' WHERE run_id = 'repo-run-a';
SELECT is((SELECT revoke_outcome || ' ' || revoked_reason FROM mesh.repository_tokens WHERE token = 'ghs_CCC'),
          'pending the run was released', 'release marks the run''s live token for revocation');

-- a GitLab provider: its install token is the credential; revocation needs it and the token's id
SELECT lives_ok($$SELECT mesh.repository_provider_set('gl', 'gitlab', 'gitlab.example', 'https://gitlab.example/api/v4')$$,
                'a GitLab provider is named by its host and API base, no App');
SELECT mesh.repository_provider_set_credential('gl', 'glpat-install');
SELECT mesh.repository_register('grp/proj', 'gl', '{"contents": "write"}');
SELECT mesh.repository_token_minted('repo-run-b', 'grp/proj', 'glpat-DDD', now() + interval '1 day', '{"contents": "read"}', 1, '4711');
SELECT is((SELECT provider_token_id FROM mesh.repository_tokens WHERE token = 'glpat-DDD'), '4711', 'a GitLab token''s row keeps its id');
UPDATE mesh.repository_tokens SET expires_at = now() - interval '1 second' WHERE token = 'glpat-DDD';
SELECT is(mesh.repository_tokens_expire(), 1, 'the expiry sweep ends the token past its expiry, and only it');
SELECT is((SELECT revoked_reason || ' ' || revoke_outcome FROM mesh.repository_tokens WHERE token = 'glpat-DDD'), 'expired pending',
          'the expired token is pending revocation at its provider');
SELECT results_eq($$SELECT provider_kind, repository, provider_token_id, credential FROM mesh.repository_tokens_to_revoke(100)
                     WHERE token IN ('glpat-DDD', 'ghs_CCC') ORDER BY provider_kind$$,
                  $$VALUES ('github', 'octo/widgets', NULL, NULL), ('gitlab', 'grp/proj', '4711', 'glpat-install')$$,
                  'the revocation round gets the install token and the id for GitLab only (GitHub revokes with the token itself)');

-- who may read what
SELECT ok(NOT has_table_privilege('mesh_admin', 'mesh.repository_provider_credentials', 'SELECT')
          AND NOT has_table_privilege('mesh_harness', 'mesh.repository_provider_credentials', 'SELECT'),
          'neither admin nor harness reads a provider credential');
SELECT ok(NOT has_table_privilege('mesh_admin', 'mesh.repository_tokens', 'SELECT')
          AND NOT has_table_privilege('mesh_harness', 'mesh.repository_tokens', 'SELECT'),
          'neither admin nor harness reads a token row');
SELECT ok(NOT has_function_privilege('mesh_harness', 'mesh.repository_token_minted(text, text, text, timestamptz, jsonb, integer, text)', 'EXECUTE'),
          'a harness cannot record a token');
SELECT ok(has_function_privilege('mesh_admin', 'mesh.repository_provider_set_credential(text, text)', 'EXECUTE')
          AND has_table_privilege('mesh_worker', 'mesh.repository_tokens', 'SELECT'),
          'the admin sets a credential, the workers read tokens (positive control)');

SELECT * FROM finish();
ROLLBACK;
