------------------------------------------------------------------------------
-- Repositories (issue 31): providers, repository grants, minted tokens.
------------------------------------------------------------------------------
-- A run reaches a repository with a token minted for exactly that repository
-- and those permissions, expiring within the hour, revoked at release: never
-- a long-lived personal token.  An admin names the providers (a GitHub App
-- installation, a GitLab instance) and the repositories each serves; a run
-- is granted a repository through mesh.grants (kind 'repository', scope: its
-- permissions as JSON); a worker mints at first use and records the token
-- here.  The provider's install-level credential (the App's private key, a
-- GitLab token able to mint project access tokens) is kept like a backend's
-- (mesh.backend_credentials): a table apart, written by one function, read
-- by no view and by no role but the workers.

CREATE TABLE mesh.repository_providers (
    name            text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    provider        text NOT NULL CHECK (provider IN ('github', 'gitlab')),
    -- the git host its tokens are offered to (github.com, an Enterprise or self-managed host)
    host            text NOT NULL CHECK (host ~ '^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?$'),
    -- the REST base (https://api.github.com, https://ghe.example/api/v3, https://gitlab.example/api/v4)
    api_url         text NOT NULL CHECK (api_url ~ '^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$'),
    app_id          text CHECK (app_id ~ '^[0-9]{1,20}$'),
    installation_id text CHECK (installation_id ~ '^[0-9]{1,20}$'),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (provider <> 'github' OR (app_id IS NOT NULL AND installation_id IS NOT NULL))
);

-- Credentials live apart (like mesh.backend_credentials); key_version counts rotations.
CREATE TABLE mesh.repository_provider_credentials (
    provider    text PRIMARY KEY REFERENCES mesh.repository_providers (name) ON DELETE CASCADE,
    credential  text NOT NULL,
    key_version integer NOT NULL DEFAULT 1,
    set_at      timestamptz NOT NULL DEFAULT now()
);

-- Which provider serves a repository, and the most a grant for it may ask.
CREATE TABLE mesh.repositories (
    repository  text PRIMARY KEY CHECK (repository ~ '^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9_.-]{1,100}$'
                                        AND repository !~ '/\.\.?$'),
    provider    text NOT NULL REFERENCES mesh.repository_providers (name),
    permissions jsonb NOT NULL CHECK (jsonb_typeof(permissions) = 'object'),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Every token minted for a run: what it could reach and its life; the value
-- only until the provider has revoked it, for the broker.
CREATE TABLE mesh.repository_tokens (
    id             bigserial PRIMARY KEY,
    run_id         text NOT NULL,
    actor_id       text,
    repository     text NOT NULL,
    provider       text NOT NULL,
    host           text NOT NULL,
    permissions    jsonb NOT NULL,
    key_version    integer NOT NULL,
    provider_token_id text,          -- the provider's id for it, where it has one (GitLab)
    token          text,
    minted_at      timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    revoked_reason text,
    -- the provider's answer to the revocation: pending until a worker has asked it
    revoke_outcome text CHECK (revoke_outcome IN ('pending', 'revoked', 'already invalid', 'failed')),
    CHECK (expires_at <= minted_at + interval '1 hour 1 minute')
);
CREATE INDEX repository_tokens_run_idx ON mesh.repository_tokens (run_id, repository) WHERE revoked_at IS NULL;
CREATE INDEX repository_tokens_pending_idx ON mesh.repository_tokens (id) WHERE revoke_outcome = 'pending';

SELECT pg_catalog.pg_extension_config_dump('mesh.repository_providers', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.repository_provider_credentials', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.repositories', '');
-- a token belongs to a live run of the dumped install: none is dumped
SELECT pg_catalog.pg_extension_config_dump('mesh.repository_tokens', 'WHERE false');

-- A permission set: a non-empty object of "read"/"write" levels (src/repos/github.c checks the same).
CREATE FUNCTION mesh.repository_permissions_valid(p jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT jsonb_typeof(p) = 'object'
       AND EXISTS (SELECT 1 FROM jsonb_each(p))
       AND NOT EXISTS (SELECT 1 FROM jsonb_each(p) e
                        WHERE e.key !~ '^[a-z_]{1,64}$' OR e.value NOT IN ('"read"', '"write"'))
$$;

-- Does P ask no more than CEILING allows (write covers read)?
CREATE FUNCTION mesh.repository_permissions_within(p jsonb, ceiling jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT NOT EXISTS (SELECT 1 FROM jsonb_each_text(p) e
                        WHERE ceiling->>e.key IS NULL
                           OR (e.value = 'write' AND ceiling->>e.key <> 'write'))
$$;

-- Name a provider (no secret here: the credential is set apart, write-only).
CREATE FUNCTION mesh.repository_provider_set(name text, provider text, host text, api_url text,
                                             app_id text DEFAULT NULL, installation_id text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('repository_provider_set', ARRAY['name', 'provider', 'host', 'api_url'],
        ARRAY[repository_provider_set.name IS NULL, repository_provider_set.provider IS NULL,
              repository_provider_set.host IS NULL, repository_provider_set.api_url IS NULL]);
    IF api_url ~ '@' OR api_url ~ '[?#]' THEN
        RAISE EXCEPTION 'api_url must not carry credentials or a query' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Set the credential with mesh.repository_provider_set_credential: it never goes in a URL.';
    END IF;
    INSERT INTO mesh.repository_providers AS p (name, provider, host, api_url, app_id, installation_id)
    VALUES (repository_provider_set.name, repository_provider_set.provider, repository_provider_set.host,
            repository_provider_set.api_url, repository_provider_set.app_id, repository_provider_set.installation_id)
    ON CONFLICT ON CONSTRAINT repository_providers_pkey DO UPDATE
       SET provider = excluded.provider, host = excluded.host, api_url = excluded.api_url,
           app_id = excluded.app_id, installation_id = excluded.installation_id, updated_at = now();
    INSERT INTO mesh.events (kind, detail)
    VALUES ('repository_provider_set', jsonb_build_object('provider', repository_provider_set.name));
END
$$;

-- Write-only, like mesh.backend_set_credential.  A rotation (a second set)
-- invalidates at once every live token minted under the old key: the broker
-- refuses it from now on, and revokes it at the provider (revoke_outcome
-- 'pending'; the value is wiped once the provider has answered).
CREATE FUNCTION mesh.repository_provider_set_credential(name text, credential text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    version integer;
    invalidated integer := 0;
BEGIN
    PERFORM mesh.require_args('repository_provider_set_credential', ARRAY['name', 'credential'],
        ARRAY[repository_provider_set_credential.name IS NULL, repository_provider_set_credential.credential IS NULL]);
    IF credential = '' THEN
        RAISE EXCEPTION 'credential must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM mesh.repository_providers p WHERE p.name = repository_provider_set_credential.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'repository provider "%" does not exist', repository_provider_set_credential.name
            USING ERRCODE = 'undefined_object', HINT = 'Name it first with mesh.repository_provider_set.';
    END IF;
    INSERT INTO mesh.repository_provider_credentials AS c (provider, credential)
    VALUES (repository_provider_set_credential.name, repository_provider_set_credential.credential)
    ON CONFLICT (provider) DO UPDATE
       SET credential = excluded.credential, key_version = c.key_version + 1, set_at = now()
    RETURNING c.key_version INTO version;
    IF version > 1 THEN
        UPDATE mesh.repository_tokens t
           SET revoked_at = now(), revoked_reason = 'the provider''s key was rotated',
               revoke_outcome = 'pending'
         WHERE t.provider = repository_provider_set_credential.name AND t.revoked_at IS NULL
           AND t.key_version < version;
        GET DIAGNOSTICS invalidated = ROW_COUNT;
    END IF;
    INSERT INTO mesh.events (kind, detail)
    VALUES (CASE WHEN version > 1 THEN 'repository_credential_rotated' ELSE 'repository_credential_set' END,
            jsonb_build_object('provider', repository_provider_set_credential.name, 'key_version', version,
                               'tokens_invalidated', invalidated));
    RETURN version;
END
$$;

-- Say which provider serves a repository and the most its grants may ask.
CREATE FUNCTION mesh.repository_register(repository text, provider text,
                                         permissions jsonb DEFAULT '{"contents": "write", "pull_requests": "write"}')
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('repository_register', ARRAY['repository', 'provider', 'permissions'],
        ARRAY[repository_register.repository IS NULL, repository_register.provider IS NULL,
              repository_register.permissions IS NULL]);
    IF NOT mesh.repository_permissions_valid(repository_register.permissions) THEN
        RAISE EXCEPTION 'permissions must be a non-empty object of "read" or "write" levels'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'For example {"contents": "write", "pull_requests": "read"}.';
    END IF;
    PERFORM 1 FROM mesh.repository_providers p WHERE p.name = repository_register.provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'repository provider "%" does not exist', repository_register.provider
            USING ERRCODE = 'undefined_object', HINT = 'Name it first with mesh.repository_provider_set.';
    END IF;
    INSERT INTO mesh.repositories AS r (repository, provider, permissions)
    VALUES (repository_register.repository, repository_register.provider, repository_register.permissions)
    ON CONFLICT ON CONSTRAINT repositories_pkey DO UPDATE
       SET provider = excluded.provider, permissions = excluded.permissions, updated_at = now();
END
$$;

-- Grant a run one repository with these permissions (a mesh.grants row of
-- kind 'repository'): what its tokens will be minted for, and no more.
CREATE FUNCTION mesh.repository_grant(run_id text, repository text,
                                      permissions jsonb DEFAULT '{"contents": "read"}')
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    repo mesh.repositories;
BEGIN
    PERFORM mesh.require_args('repository_grant', ARRAY['run_id', 'repository', 'permissions'],
        ARRAY[repository_grant.run_id IS NULL, repository_grant.repository IS NULL,
              repository_grant.permissions IS NULL]);
    SELECT * INTO repo FROM mesh.repositories r WHERE r.repository = repository_grant.repository;
    IF repo.repository IS NULL THEN
        RAISE EXCEPTION 'repository "%" is not registered', repository_grant.repository
            USING ERRCODE = 'undefined_object', HINT = 'An admin registers it with mesh.repository_register.';
    END IF;
    IF NOT mesh.repository_permissions_valid(repository_grant.permissions) THEN
        RAISE EXCEPTION 'permissions must be a non-empty object of "read" or "write" levels'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT mesh.repository_permissions_within(repository_grant.permissions, repo.permissions) THEN
        RAISE EXCEPTION 'permissions % exceed what repository "%" allows', repository_grant.permissions, repo.repository
            USING ERRCODE = 'insufficient_privilege', HINT = format('At most %s.', repo.permissions);
    END IF;
    INSERT INTO mesh.grants AS g (run_id, kind, name, scope)
    VALUES (repository_grant.run_id, 'repository', repository_grant.repository, repository_grant.permissions::text)
    ON CONFLICT ON CONSTRAINT grants_run_id_kind_name_key DO UPDATE
       SET scope = excluded.scope, revoked_at = NULL, revoked_reason = NULL, issued_at = now();
    INSERT INTO mesh.events (kind, run_id, detail)
    VALUES ('repository_granted', repository_grant.run_id,
            jsonb_build_object('repository', repository_grant.repository, 'permissions', repository_grant.permissions));
END
$$;

-- A worker minted a token: its row.  The expiry is the provider's, capped to the hour.
CREATE FUNCTION mesh.repository_token_minted(p_run_id text, p_repository text, p_token text,
                                             p_expires_at timestamptz, p_permissions jsonb,
                                             p_key_version integer, p_provider_token_id text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    repo mesh.repositories;
    prov mesh.repository_providers;
    id bigint;
BEGIN
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = p_run_id;
    SELECT * INTO repo FROM mesh.repositories r WHERE r.repository = p_repository;
    SELECT * INTO prov FROM mesh.repository_providers p WHERE p.name = repo.provider;
    IF ws.id IS NULL OR repo.repository IS NULL THEN
        RAISE EXCEPTION 'run "%" or repository "%" is unknown', p_run_id, p_repository
            USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO mesh.repository_tokens (run_id, actor_id, repository, provider, host, permissions,
                                        key_version, provider_token_id, token, expires_at)
    VALUES (p_run_id, ws.created_by_actor_id, p_repository, prov.name, prov.host, p_permissions,
            p_key_version, p_provider_token_id, p_token, least(p_expires_at, now() + interval '1 hour'))
    RETURNING repository_tokens.id INTO id;
    INSERT INTO mesh.events (kind, run_id, workspace_id, detail)
    VALUES ('repository_token_minted', p_run_id, ws.id,
            jsonb_build_object('token_id', id, 'repository', p_repository, 'permissions', p_permissions,
                               'actor_id', ws.created_by_actor_id));
    RETURN id;
END
$$;

-- A worker asked the provider to revoke a token: the outcome is kept.
CREATE FUNCTION mesh.repository_token_revoked(p_id bigint, p_outcome text)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.repository_tokens
       SET token = NULL, revoke_outcome = p_outcome,
           revoked_at = coalesce(revoked_at, now()), revoked_reason = coalesce(revoked_reason, 'revoked')
     WHERE id = p_id;
    INSERT INTO mesh.events (kind, run_id, detail)
    SELECT 'repository_token_revoked', t.run_id, jsonb_build_object('token_id', t.id, 'outcome', p_outcome)
      FROM mesh.repository_tokens t WHERE t.id = p_id;
$$;

-- Release ends a run's tokens: each is marked for revocation at its provider.
CREATE FUNCTION mesh.repository_tokens_end_with_run() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF NEW.status IN ('released', 'failed') AND OLD.status IS DISTINCT FROM NEW.status THEN
        UPDATE mesh.repository_tokens t
           SET revoked_at = now(), revoked_reason = 'the run was ' || NEW.status, revoke_outcome = 'pending'
         WHERE t.run_id = NEW.run_id AND t.revoked_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER repository_tokens_end_with_run AFTER UPDATE OF status ON mesh.workspaces
    FOR EACH ROW EXECUTE FUNCTION mesh.repository_tokens_end_with_run();

-- "What could this run see", for repositories: grants and every token minted, never a value.
CREATE FUNCTION mesh.run_repository_tokens(p_run_id text)
RETURNS TABLE (token_id bigint, repository text, host text, permissions jsonb, actor_id text,
               minted_at timestamptz, expires_at timestamptz, revoked_at timestamptz,
               revoked_reason text, revoke_outcome text, live boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT mesh.require_args('run_repository_tokens', ARRAY['run_id'], ARRAY[p_run_id IS NULL]);
    SELECT t.id, t.repository, t.host, t.permissions, t.actor_id, t.minted_at, t.expires_at,
           t.revoked_at, t.revoked_reason, t.revoke_outcome,
           t.revoked_at IS NULL AND t.expires_at > now()
      FROM mesh.repository_tokens t WHERE t.run_id = p_run_id ORDER BY t.id
$$;

-- The broker's answer to a sandbox asking for a repository token (src/broker_repos.c): the
-- run token checked as mesh.broker_exchange checks it, then the grant, then the host (a
-- token is offered only to its own host).  Granted with the live token when one has more
-- than five minutes left; granted without one, with what minting needs, when none has
-- (the broker mints and records it).  Every call, granted or refused, is an event.
CREATE FUNCTION mesh.broker_repository_token(p_token_sha256 bytea, p_host text, p_repository text,
                                             p_workspace_ref text,
                                             OUT granted boolean, OUT reason text, OUT token text,
                                             OUT run_id text, OUT permissions jsonb, OUT provider_kind text,
                                             OUT api_url text, OUT app_id text, OUT installation_id text,
                                             OUT credential text, OUT key_version integer)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    tok mesh.run_tokens;
    ws mesh.workspaces;
    gr mesh.grants;
    repo mesh.repositories;
    prov mesh.repository_providers;
BEGIN
    granted := false;
    SELECT * INTO tok FROM mesh.run_tokens t WHERE t.token_sha256 = p_token_sha256;
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
            reason := 'the token belongs to another workspace';
        END IF;
    END IF;
    IF reason IS NULL THEN
        SELECT * INTO gr FROM mesh.grants g
         WHERE g.run_id = tok.run_id AND g.kind = 'repository' AND g.name = p_repository;
        SELECT * INTO repo FROM mesh.repositories r WHERE r.repository = p_repository;
        SELECT * INTO prov FROM mesh.repository_providers p WHERE p.name = repo.provider;
        IF gr.id IS NULL THEN
            reason := 'the run has no grant for this repository';
        ELSIF gr.revoked_at IS NOT NULL THEN
            reason := 'grant revoked: ' || coalesce(gr.revoked_reason, '');
        ELSIF gr.expires_at IS NOT NULL AND gr.expires_at <= now() THEN
            reason := 'grant expired';
        ELSIF repo.repository IS NULL THEN
            reason := 'the repository is not registered';
        ELSIF prov.host IS DISTINCT FROM p_host THEN
            reason := 'the grant does not name this host';
        END IF;
    END IF;
    IF reason IS NULL THEN
        -- the grant's scope: a permission object, or "read"/"write" for the contents
        permissions := CASE WHEN gr.scope IN ('read', 'write') THEN jsonb_build_object('contents', gr.scope)
                            WHEN gr.scope IS NULL THEN '{"contents": "read"}'::jsonb
                            ELSE gr.scope::jsonb END;
        SELECT c.credential, c.key_version INTO credential, key_version
          FROM mesh.repository_provider_credentials c WHERE c.provider = prov.name;
        IF credential IS NULL THEN
            reason := 'the repository''s provider has no credential';
        END IF;
    END IF;
    IF reason IS NULL THEN
        SELECT t.token INTO token FROM mesh.repository_tokens t
         WHERE t.run_id = tok.run_id AND t.repository = p_repository AND t.revoked_at IS NULL
           AND t.key_version = broker_repository_token.key_version
           AND t.expires_at > now() + interval '5 minutes' AND t.permissions = broker_repository_token.permissions
         ORDER BY t.expires_at DESC LIMIT 1;
        provider_kind := prov.provider;     -- the broker answers git's user name by it
        IF token IS NOT NULL THEN
            credential := NULL;     -- nothing to mint: the key is not handed out
        ELSE
            api_url := prov.api_url;
            app_id := prov.app_id;
            installation_id := prov.installation_id;
        END IF;
        run_id := tok.run_id;
        granted := true;
        UPDATE mesh.grants SET uses = uses + 1, last_used_at = now(),
               first_used_at = coalesce(first_used_at, now()) WHERE id = gr.id;
    END IF;
    INSERT INTO mesh.events (kind, run_id, workspace_id, detail)
    VALUES (CASE WHEN granted THEN 'repository_token_read' ELSE 'repository_token_refused' END, tok.run_id, ws.id,
            jsonb_build_object('repository', p_repository, 'host', p_host, 'actor_id', ws.created_by_actor_id,
                               'minting', granted AND token IS NULL, 'reason', reason));
END
$$;

-- Tokens whose revocation at the provider is pending, with what revoking needs (the broker's
-- round): GitHub revokes with the token itself, GitLab with the install token and the token's id.
CREATE FUNCTION mesh.repository_tokens_to_revoke(p_limit integer)
RETURNS TABLE (id bigint, provider_kind text, api_url text, repository text, provider_token_id text,
               credential text, token text)
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT t.id, p.provider, p.api_url, t.repository, t.provider_token_id,
           CASE WHEN p.provider = 'gitlab' THEN c.credential END, t.token
      FROM mesh.repository_tokens t JOIN mesh.repository_providers p ON p.name = t.provider
      LEFT JOIN mesh.repository_provider_credentials c ON c.provider = p.name
     WHERE t.revoke_outcome = 'pending' ORDER BY t.id LIMIT p_limit
$$;

-- The reaper's sweep: a token past its row's expiry is ended and revoked at its provider like
-- one whose run ended (a GitLab token lives to the end of a day at GitLab: this ends it within
-- the hour).  Returns how many it ended.
CREATE FUNCTION mesh.repository_tokens_expire() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ended integer;
BEGIN
    UPDATE mesh.repository_tokens t
       SET revoked_at = now(), revoked_reason = 'expired', revoke_outcome = 'pending'
     WHERE t.revoked_at IS NULL AND t.expires_at <= now();
    GET DIAGNOSTICS ended = ROW_COUNT;
    RETURN ended;
END
$$;
