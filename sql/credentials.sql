-- credentials: secrets are write-only, environments declare grants per run,
-- "what could this run see" is one query, env delivery never stores a value.
\set ON_ERROR_STOP 0

-- secrets belong to an agent; set returns the version, rotation bumps it
SELECT mesh.secret_set('coder', 'github_pat', 'ghp_CANARY_0000111122223333');
SELECT mesh.secret_set('coder', 'npm_token', 'npm_CANARY_4444');
SELECT mesh.secret_set('coder', 'npm_token', 'npm_CANARY_5555');
SELECT agent_id, name, version FROM mesh.secret_catalog WHERE agent_id = 'coder' ORDER BY name;
SELECT * FROM regress.try($$SELECT mesh.secret_set('coder', 'bad name', 'x')$$);
SELECT * FROM regress.try($$SELECT mesh.secret_set('coder', 'empty', '')$$);

-- environments are checked when declared
SELECT * FROM regress.try($$SELECT mesh.environment_set('broken', '{"kind": "secret"}')$$);
SELECT * FROM regress.try($$SELECT mesh.environment_set('broken', '[{"kind": "password", "name": "x"}]')$$);
SELECT * FROM regress.try($$SELECT mesh.environment_set('broken', '[{"kind": "secret", "name": "x", "as": "1BAD"}]')$$);
SELECT mesh.environment_set('github', '[{"kind": "secret", "name": "github_pat", "as": "GH_TOKEN", "ttl": "1 hour"},
                                        {"kind": "secret", "name": "npm_token"},
                                        {"kind": "repository", "name": "acme/widgets", "scope": "read"},
                                        {"kind": "registry", "name": "npm"}]');
SELECT mesh.environment_set('needs-missing', '[{"kind": "secret", "name": "aws_key"}]');

-- a run names its environment; its grants are persisted with the declaration
SELECT status, environment FROM mesh_acquire('cred-run', 'coder', 'olga', environment => 'github');
SELECT kind, name, scope, delivered_as, expires_at > now() AS expires_later, uses, live
  FROM mesh.run_grants('cred-run');
SELECT * FROM regress.try($$SELECT mesh_acquire('cred-nope', 'coder', 'olga', environment => 'no-such-env')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('cred-miss', 'coder', 'olga', environment => 'needs-missing')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('cred-run', 'coder', 'olga', environment => 'other')$$);
-- a run without an environment sees nothing
SELECT status FROM mesh_acquire('plain-run', 'coder', 'olga');
SELECT count(*) AS grants FROM mesh.run_grants('plain-run');

-- the first call mints a run token (only its hash is kept) and delivers it as a 0600 file
SELECT stdout FROM mesh_exec('cred-run', ARRAY['sh', '-c', 'stat -c %a .mesh/run-token; wc -c < .mesh/run-token']);
SELECT count(*) AS tokens, bool_and(revoked_at IS NULL) AS live, bool_and(length(token_sha256) = 32) AS sha256_only
  FROM mesh.run_tokens WHERE run_id = 'cred-run';
-- a grant "as" an env variable is delivered; its value never comes back out or into a row
SELECT stdout FROM mesh_exec('cred-run', ARRAY['sh', '-c', 'echo "GH=$GH_TOKEN"; test -n "$GH_TOKEN" && echo set']);
SELECT stdout FROM mesh_exec('plain-run', ARRAY['sh', '-c', 'echo "GH=$GH_TOKEN"']);
SELECT count(*) AS leaks FROM mesh.execs WHERE concat(stdout, stderr, error, array_to_string(argv, ' ')) LIKE '%CANARY%';
SELECT count(*) AS leaks FROM mesh.events WHERE detail::text LIKE '%CANARY%';
SELECT name, uses > 0 AS used, first_used_at IS NOT NULL AS first_use_recorded FROM mesh.run_grants('cred-run')
 WHERE kind = 'secret' ORDER BY name;
SELECT kind, detail->>'secret' AS secret FROM mesh.events WHERE run_id = 'cred-run' AND kind LIKE 'secret%' ORDER BY id;

-- rotation revokes the run's token at once; the next call gets a fresh one
SELECT mesh.secret_set('coder', 'github_pat', 'ghp_CANARY_rotated_9999');
SELECT count(*) FILTER (WHERE revoked_at IS NULL) AS live_tokens,
       count(*) FILTER (WHERE revoked_reason = 'secret github_pat was rotated') AS revoked_by_rotation
  FROM mesh.run_tokens WHERE run_id = 'cred-run';
SELECT exit_code FROM mesh_exec('cred-run', ARRAY['true']);
SELECT count(*) FILTER (WHERE revoked_at IS NULL) AS live_tokens FROM mesh.run_tokens WHERE run_id = 'cred-run';

-- revoking a grant stops its delivery from then on
SELECT mesh.grant_revoke('cred-run', 'secret', 'github_pat', 'no longer needed');
SELECT stdout FROM mesh_exec('cred-run', ARRAY['sh', '-c', 'echo "GH=$GH_TOKEN"']);
SELECT name, live, revoked_reason FROM mesh.run_grants('cred-run') WHERE name = 'github_pat';
SELECT * FROM regress.try($$SELECT mesh.grant_revoke('cred-run', 'secret', 'github_pat')$$);

-- release kills the run's token
SELECT mesh_release('cred-run');
SELECT count(*) FILTER (WHERE revoked_at IS NULL) AS live_tokens FROM mesh.run_tokens WHERE run_id = 'cred-run';
SELECT bool_or(live) AS anything_live FROM mesh.run_grants('cred-run');
SELECT mesh_release('plain-run');
SELECT * FROM regress.try($$SELECT mesh.secret_delete('coder', 'nope')$$);
