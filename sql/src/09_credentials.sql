------------------------------------------------------------------------------
-- Credentials: declared per run, minted per run, read through the broker.
------------------------------------------------------------------------------
-- Secrets belong to an agent.  Nobody reads a value back through SQL: the
-- broker (a mesh worker) hands one to a sandbox holding a valid run token.
CREATE TABLE mesh.secrets (
    agent_id   text NOT NULL,
    name       text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_.-]{0,127}$'),
    value      text NOT NULL,
    version    integer NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz,
    PRIMARY KEY (agent_id, name)
);

-- What an environment needs: an admin declares it once, runs name it.
-- needs: [{"kind": "secret", "name": "github_pat", "as": "GH_TOKEN", "ttl": "1 hour"},
--         {"kind": "repository", "name": "org/repo", "scope": "read"},
--         {"kind": "registry", "name": "npm"}]
CREATE TABLE mesh.environments (
    name       text PRIMARY KEY,
    needs      jsonb NOT NULL CHECK (jsonb_typeof(needs) = 'array'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The declaration persisted per run: what this run could see, and its use.
CREATE TABLE mesh.grants (
    id            bigserial PRIMARY KEY,
    run_id        text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('secret', 'repository', 'registry')),
    name          text NOT NULL,
    scope         text,
    deliver_as    text CHECK (deliver_as ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
    issued_at     timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    revoked_reason text,
    first_used_at timestamptz,
    last_used_at  timestamptz,
    uses          integer NOT NULL DEFAULT 0,
    UNIQUE (run_id, kind, name)
);

-- Per-run tokens: only a hash is kept.  A token dies with its run's release,
-- its expiry, or a revocation (rotation of a secret it could reach).
CREATE TABLE mesh.run_tokens (
    id             bigserial PRIMARY KEY,
    run_id         text NOT NULL,
    token_sha256   bytea NOT NULL UNIQUE,
    issued_at      timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    revoked_reason text
);
CREATE INDEX run_tokens_run_idx ON mesh.run_tokens (run_id) WHERE revoked_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('mesh.secrets', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.environments', '');
-- secrets are dumped as set (README "Backup and restore"); a live run's grants are not
-- (01_catalog.sql), and no run token is: each belongs to a live run of the dumped install
SELECT pg_catalog.pg_extension_config_dump('mesh.grants',
    $$WHERE run_id NOT IN (SELECT w.run_id FROM mesh.workspaces w
                            WHERE NOT (w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL)))$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.grants_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.run_tokens', 'WHERE false');

-- Revoke the live tokens of runs that can reach (agent, secret): their
-- workspaces get fresh tokens on their next call, the old ones are refused.
CREATE FUNCTION mesh.revoke_tokens_for_secret(p_agent_id text, p_name text, p_reason text)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    WITH revoked AS (
        UPDATE mesh.run_tokens t SET revoked_at = now(), revoked_reason = p_reason
         WHERE t.revoked_at IS NULL
           AND t.run_id IN (SELECT g.run_id FROM mesh.grants g JOIN mesh.workspaces w ON w.run_id = g.run_id
                             WHERE g.kind = 'secret' AND g.name = p_name AND w.agent_id = p_agent_id)
        RETURNING 1)
    SELECT count(*)::integer FROM revoked
$$;

-- Set or rotate a secret.  Rotation invalidates the tokens that could read it, at once.
CREATE FUNCTION mesh.secret_set(agent_id text, name text, value text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    new_version integer;
BEGIN
    PERFORM mesh.require_args('secret_set', ARRAY['agent_id', 'name', 'value'],
        ARRAY[secret_set.agent_id IS NULL, secret_set.name IS NULL, secret_set.value IS NULL]);
    IF value = '' THEN
        RAISE EXCEPTION 'a secret value must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF name IS NULL OR name !~ '^[A-Za-z_][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'secret name "%" is not valid', name USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Names start with a letter or "_" and hold letters, digits, "_", "." and "-".';
    END IF;
    INSERT INTO mesh.secrets AS s (agent_id, name, value)
    VALUES (secret_set.agent_id, secret_set.name, secret_set.value)
    ON CONFLICT ON CONSTRAINT secrets_pkey DO UPDATE
       SET value = excluded.value, version = s.version + 1, rotated_at = now()
    RETURNING s.version INTO new_version;
    IF new_version > 1 THEN
        PERFORM mesh.revoke_tokens_for_secret(secret_set.agent_id, secret_set.name,
                                              format('secret %s was rotated', secret_set.name));
    END IF;
    INSERT INTO mesh.events (kind, detail)
    VALUES (CASE WHEN new_version > 1 THEN 'secret_rotated' ELSE 'secret_set' END,
            jsonb_build_object('agent_id', secret_set.agent_id, 'name', secret_set.name, 'version', new_version));
    RETURN new_version;
END
$$;

CREATE FUNCTION mesh.secret_delete(agent_id text, name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('secret_delete', ARRAY['agent_id', 'name'],
        ARRAY[secret_delete.agent_id IS NULL, secret_delete.name IS NULL]);
    DELETE FROM mesh.secrets s WHERE s.agent_id = secret_delete.agent_id AND s.name = secret_delete.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent "%" has no secret "%"', secret_delete.agent_id, secret_delete.name
            USING ERRCODE = 'undefined_object', HINT = 'See mesh.secret_catalog.';
    END IF;
    PERFORM mesh.revoke_tokens_for_secret(secret_delete.agent_id, secret_delete.name,
                                          format('secret %s was deleted', secret_delete.name));
    INSERT INTO mesh.events (kind, detail)
    VALUES ('secret_deleted', jsonb_build_object('agent_id', secret_delete.agent_id, 'name', secret_delete.name));
END
$$;

-- Declare what an environment needs; checked here so runs never carry a bad declaration.
CREATE FUNCTION mesh.environment_set(name text, needs jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    need jsonb;
BEGIN
    PERFORM mesh.require_args('environment_set', ARRAY['name', 'needs'],
        ARRAY[environment_set.name IS NULL, environment_set.needs IS NULL]);
    IF jsonb_typeof(needs) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'needs must be a JSON array of grants' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'For example [{"kind": "secret", "name": "github_pat", "as": "GH_TOKEN", "ttl": "1 hour"}].';
    END IF;
    FOR need IN SELECT * FROM jsonb_array_elements(needs) LOOP
        IF need->>'kind' IS NULL OR need->>'kind' NOT IN ('secret', 'repository', 'registry') THEN
            RAISE EXCEPTION 'grant % has no valid kind (secret, repository or registry)', need
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF coalesce(need->>'name', '') = '' THEN
            RAISE EXCEPTION 'grant % has no name', need USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF need ? 'as' AND (need->>'as') !~ '^[A-Za-z_][A-Za-z0-9_]*$' THEN
            RAISE EXCEPTION 'grant %: "as" must be an environment variable name', need
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF need ? 'ttl' THEN
            PERFORM (need->>'ttl')::interval;
        END IF;
    END LOOP;
    INSERT INTO mesh.environments AS e (name, needs) VALUES (environment_set.name, environment_set.needs)
    ON CONFLICT ON CONSTRAINT environments_pkey DO UPDATE SET needs = excluded.needs, updated_at = now();
END
$$;

-- Revoke one grant of a run: the broker refuses it from now on.
CREATE FUNCTION mesh.grant_revoke(run_id text, kind text, name text, reason text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('grant_revoke', ARRAY['run_id', 'kind', 'name'],
        ARRAY[grant_revoke.run_id IS NULL, grant_revoke.kind IS NULL, grant_revoke.name IS NULL]);
    UPDATE mesh.grants g SET revoked_at = now(), revoked_reason = coalesce(reason, 'revoked by an operator')
     WHERE g.run_id = grant_revoke.run_id AND g.kind = grant_revoke.kind AND g.name = grant_revoke.name
       AND g.revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run "%" has no live % grant "%"', grant_revoke.run_id, grant_revoke.kind, grant_revoke.name
            USING ERRCODE = 'undefined_object', HINT = 'See mesh.run_grants(run_id).';
    END IF;
    INSERT INTO mesh.events (kind, run_id, detail)
    VALUES ('grant_revoked', grant_revoke.run_id,
            jsonb_build_object('kind', grant_revoke.kind, 'name', grant_revoke.name, 'reason', reason));
END
$$;

-- "What could this run see": its grants, their expiry, revocation and use, and its tokens.
CREATE FUNCTION mesh.run_grants(p_run_id text)
RETURNS TABLE (kind text, name text, scope text, delivered_as text, issued_at timestamptz,
               expires_at timestamptz, revoked_at timestamptz, revoked_reason text,
               uses integer, first_used_at timestamptz, last_used_at timestamptz, live boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT mesh.require_args('run_grants', ARRAY['run_id'], ARRAY[p_run_id IS NULL]);
    SELECT g.kind, g.name, g.scope, g.deliver_as, g.issued_at, g.expires_at, g.revoked_at, g.revoked_reason,
           g.uses, g.first_used_at, g.last_used_at,
           g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > now())
           AND EXISTS (SELECT 1 FROM mesh.workspaces w WHERE w.run_id = g.run_id AND w.status NOT IN ('released', 'failed'))
      FROM mesh.grants g WHERE g.run_id = p_run_id ORDER BY g.kind, g.name
$$;

CREATE VIEW mesh.secret_catalog AS
SELECT agent_id, name, version, created_at, rotated_at FROM mesh.secrets;

-- The broker's exchange: a run token and a secret name for the value, or a
-- refusal with its reason.  Every call, granted or refused, is an event.
CREATE FUNCTION mesh.broker_exchange(p_token_sha256 bytea, p_name text, p_workspace_ref text,
                                     OUT granted boolean, OUT value text, OUT reason text)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    tok mesh.run_tokens;
    ws mesh.workspaces;
    gr mesh.grants;
BEGIN
    granted := false;
    SELECT * INTO tok FROM mesh.run_tokens WHERE token_sha256 = p_token_sha256;
    IF tok.id IS NULL THEN
        reason := 'unknown token';
    ELSIF tok.revoked_at IS NOT NULL THEN
        reason := 'token revoked: ' || coalesce(tok.revoked_reason, '');
    ELSIF tok.expires_at <= now() THEN
        reason := 'token expired';
    END IF;
    IF reason IS NULL THEN
        SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = tok.run_id;
        IF ws.status IN ('released', 'failed') THEN
            reason := 'the run''s workspace is ' || ws.status;
        ELSIF ws.external_ref IS DISTINCT FROM p_workspace_ref THEN
            -- the broker knows which workspace's socket the request came in on
            reason := 'the token belongs to another workspace';
        END IF;
    END IF;
    IF reason IS NULL THEN
        SELECT * INTO gr FROM mesh.grants g
         WHERE g.run_id = tok.run_id AND g.kind = 'secret' AND g.name = p_name;
        IF gr.id IS NULL THEN
            reason := 'the run has no grant for this secret';
        ELSIF gr.revoked_at IS NOT NULL THEN
            reason := 'grant revoked: ' || coalesce(gr.revoked_reason, '');
        ELSIF gr.expires_at IS NOT NULL AND gr.expires_at <= now() THEN
            reason := 'grant expired';
        END IF;
    END IF;
    IF reason IS NULL THEN
        SELECT s.value INTO value FROM mesh.secrets s WHERE s.agent_id = ws.agent_id AND s.name = p_name;
        IF value IS NULL THEN
            reason := 'the agent has no such secret';
        END IF;
    END IF;
    granted := reason IS NULL;
    IF granted THEN
        UPDATE mesh.grants SET uses = uses + 1, last_used_at = now(),
               first_used_at = coalesce(first_used_at, now()) WHERE id = gr.id;
    END IF;
    INSERT INTO mesh.events (kind, run_id, workspace_id, detail)
    VALUES (CASE WHEN granted THEN 'secret_read' ELSE 'secret_refused' END, tok.run_id, ws.id,
            jsonb_build_object('secret', p_name, 'actor_id', ws.created_by_actor_id, 'reason', reason));
END
$$;
