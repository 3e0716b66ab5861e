/* mesh_exec--1.0--1.1.sql: upgrade an installed mesh_exec 1.0 to 1.1 (ALTER EXTENSION mesh_exec UPDATE) */

\echo Use "ALTER EXTENSION mesh_exec UPDATE TO '1.1'" to load this file. \quit

-- Every change below is also in sql/src/ (what a fresh 1.1 install runs); test/e2e/upgrade.t
-- proves a 1.0 database updated here has the catalog of a fresh 1.1 install.

-- ---- resumable conversations and lifecycle honesty (issue 32): sql/src/15_lifecycle.sql ----
ALTER TABLE mesh.workspaces ADD COLUMN resume_of text, ADD COLUMN resumed_by text;

-- The role that called a SECURITY DEFINER function: SET ROLE's role, or the
-- session's.  (current_user inside it is the definer.)
CREATE FUNCTION mesh.invoking_role() RETURNS oid
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT CASE WHEN current_setting('role') = 'none' THEN session_user ELSE current_setting('role') END::regrole::oid
$$;

-- Move the hibernated workspace of run p_resume_of to run p_run_id (declared,
-- nothing materialized yet), both rows locked, in the caller's transaction.
-- Returns NULL when it moved, or why the new run starts fresh instead.  A
-- new run the caller may not drive, or one that already has a workspace,
-- raises: that is a mistake, not a fallback.
CREATE FUNCTION mesh.workspace_resume(p_run_id text, p_resume_of text, p_caller oid) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    old mesh.workspaces;
    why text;
BEGIN
    -- both rows locked in id order: two resumes crossing each other cannot deadlock
    PERFORM 1 FROM mesh.workspaces w WHERE w.run_id IN (p_run_id, p_resume_of) ORDER BY w.id FOR UPDATE;
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = p_run_id;
    IF ws.id IS NULL OR NOT mesh.may_drive(ws.owner_role, p_caller) THEN
        RAISE EXCEPTION 'run "%" is not declared', p_run_id
            USING ERRCODE = 'undefined_object', HINT = 'Declare it first with mesh_acquire.';
    END IF;
    IF ws.status <> 'pending' OR ws.external_ref IS NOT NULL OR ws.resume_of IS NOT NULL THEN
        RAISE EXCEPTION 'run "%" already has a workspace (%), it cannot resume another run''s', p_run_id, ws.status
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Resume right after mesh_acquire, before the run''s first call.';
    END IF;
    SELECT * INTO old FROM mesh.workspaces w WHERE w.run_id = p_resume_of;
    why := CASE
        WHEN p_resume_of = p_run_id THEN 'a run cannot resume itself'
        -- another role's run does not exist for this caller: the same words as a run never declared
        WHEN old.id IS NULL OR NOT mesh.may_drive(old.owner_role, p_caller) THEN
            format('there is no run "%s" this role may resume', p_resume_of)
        WHEN old.agent_id <> ws.agent_id THEN
            format('run "%s" belongs to agent "%s", not to agent "%s"', p_resume_of, old.agent_id, ws.agent_id)
        WHEN old.resumed_by IS NOT NULL THEN
            format('the workspace of run "%s" was already resumed by run "%s"', p_resume_of, old.resumed_by)
        WHEN old.external_ref IS NULL THEN
            format('run "%s" never had a workspace', p_resume_of)
        WHEN old.release_outcome IS NOT NULL THEN
            format('the workspace of run "%s" was %s%s', p_resume_of, old.release_outcome,
                   coalesce(' (' || old.release_reason || ')', ''))
        WHEN old.status = 'failed' THEN
            format('the workspace of run "%s" failed: %s', p_resume_of, coalesce(old.status_reason, 'no reason recorded'))
        WHEN old.status <> 'pending' OR old.status_reason_code IS DISTINCT FROM 'hibernated_idle'
                                     AND old.status_reason_code IS DISTINCT FROM 'hibernated_by_backend' THEN
            format('the workspace of run "%s" is %s, not hibernated (a live workspace is never shared by two runs)',
                   p_resume_of, old.status)
        WHEN old.hibernated_until < now() THEN
            format('the workspace of run "%s" expired: its retention ended at %s', p_resume_of, old.hibernated_until)
        WHEN NOT coalesce((old.capabilities->>'hibernate')::boolean, false) THEN
            format('backend "%s" does not hibernate workspaces', old.backend_kind)
    END;
    IF why IS NOT NULL THEN
        PERFORM mesh.workspace_event(ws, 'resume_refused', jsonb_build_object('resume_of', p_resume_of, 'reason', why));
        RETURN why;
    END IF;
    UPDATE mesh.workspaces w
       SET backend_kind = old.backend_kind, external_ref = old.external_ref, size = old.size,
           capabilities = old.capabilities, egress = old.egress, snapshot_id = old.snapshot_id,
           resume_of = p_resume_of, hibernated_until = old.hibernated_until,
           expiry_warned_at = old.expiry_warned_at, status_reason_code = old.status_reason_code,
           status_reason = format('resumes the hibernated workspace of run "%s"; its next call wakes it', p_resume_of)
     WHERE w.id = ws.id;
    UPDATE mesh.workspaces w
       SET status = 'released', release_outcome = 'hibernated', resumed_by = p_run_id, released_at = now(),
           release_reason = format('resumed by run "%s"', p_run_id)
     WHERE w.id = old.id;
    UPDATE mesh.run_tokens t SET revoked_at = now(), revoked_reason = format('run "%s" resumed its workspace', p_run_id)
     WHERE t.run_id = old.run_id AND t.revoked_at IS NULL;
    ws.backend_kind := old.backend_kind;
    PERFORM mesh.workspace_event(ws, 'resumed', jsonb_build_object('resume_of', p_resume_of));
    PERFORM mesh.workspace_event(old, 'resumed_by', jsonb_build_object('run_id', p_run_id));
    RETURN NULL;
END
$$;

-- The harness's call: run_id (declared with mesh_acquire, before its first
-- call) continues the conversation of run resume_of.  True when it took
-- that run's hibernated workspace over; false, with a NOTICE saying why,
-- when it starts with a fresh one.
CREATE FUNCTION @extschema@.mesh_resume(run_id text, resume_of text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    why text;
BEGIN
    PERFORM mesh.require_args('mesh_resume', ARRAY['run_id', 'resume_of'],
        ARRAY[mesh_resume.run_id IS NULL, mesh_resume.resume_of IS NULL]);
    why := mesh.workspace_resume(mesh_resume.run_id, mesh_resume.resume_of, mesh.invoking_role());
    IF why IS NOT NULL THEN
        RAISE NOTICE 'mesh: run "%" starts with a fresh workspace: %', mesh_resume.run_id, why;
        RETURN false;
    END IF;
    RAISE NOTICE 'mesh: run "%" resumes the hibernated workspace of run "%"; its first call wakes it',
        mesh_resume.run_id, mesh_resume.resume_of;
    RETURN true;
END
$$;

------------------------------------------------------------------------------
-- Lifecycle honesty.  Every workspace row says why it ended (end_reason) and
-- when (ended_at), set by a trigger on the status change whichever function
-- made it; a hibernated workspace has a retention deadline (hibernated_until,
-- mesh.settings.hibernated_retention after its first hibernation), which a
-- resume carries over and never resets: only mesh_extend moves it, recorded
-- as an event.  The reaper's sweep warns (event 'expiry_warning' and a NOTIFY
-- on channel mesh_lifecycle) expiry_warning before the deadline, and past it
-- releases the workspace (destroyed; end_reason 'expired').
------------------------------------------------------------------------------

ALTER TABLE mesh.workspaces
    ADD COLUMN end_reason text CHECK (end_reason IN ('released', 'idle_reaped', 'budget', 'expired', 'backend_lost',
                                                     'oom', 'admin', 'resumed', 'acquire_failed')),
    ADD COLUMN ended_at timestamptz,
    ADD COLUMN hibernated_until timestamptz,
    ADD COLUMN expiry_warned_at timestamptz;
ALTER TABLE mesh.settings
    ADD COLUMN hibernated_retention interval NOT NULL DEFAULT '7 days' CHECK (hibernated_retention > '0'),
    ADD COLUMN expiry_warning interval NOT NULL DEFAULT '1 hour' CHECK (expiry_warning >= '0');
CREATE INDEX workspaces_hibernated_idx ON mesh.workspaces (hibernated_until)
    WHERE status = 'pending' AND hibernated_until IS NOT NULL AND release_outcome IS NULL;

-- Why a row ended, from what the move that ended it recorded.
CREATE FUNCTION mesh.workspace_end_reason(w mesh.workspaces) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT CASE
        WHEN w.resumed_by IS NOT NULL THEN 'resumed'
        WHEN w.status_reason_code = 'budget_exhausted' THEN 'budget'
        WHEN w.status_reason_code = 'lost' THEN 'backend_lost'
        WHEN w.status_reason_code = 'acquire_failed' THEN 'acquire_failed'
        WHEN w.release_reason LIKE 'hibernated past its retention%'
          OR w.release_reason LIKE 'outlived the longest possible run%' THEN 'expired'
        WHEN w.release_reason LIKE 'idle for more than%' THEN 'idle_reaped'
        ELSE 'released' END
$$;

-- The trigger: end reason and time at the move to released or failed; the
-- retention deadline at a workspace's first hibernation (kept after that:
-- waking, hibernating again and resuming never reset it).
CREATE FUNCTION mesh.workspace_lifecycle() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF NEW.status IN ('released', 'failed') AND NEW.ended_at IS NULL THEN
        -- an administrator's release chose 'admin' at its start (mesh.workspace_begin_release)
        NEW.end_reason := coalesce(NEW.end_reason, mesh.workspace_end_reason(NEW));
        NEW.ended_at := now();
    ELSIF NEW.status = 'pending' AND NEW.hibernated_until IS NULL AND NEW.external_ref IS NOT NULL
          AND NEW.status_reason_code IN ('hibernated_idle', 'hibernated_by_backend') THEN
        NEW.hibernated_until := now() + (SELECT s.hibernated_retention FROM mesh.settings s);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER workspaces_lifecycle BEFORE UPDATE ON mesh.workspaces FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.status_reason_code IS DISTINCT FROM OLD.status_reason_code)
    EXECUTE FUNCTION mesh.workspace_lifecycle();

-- The reaper's sweep: hibernated workspaces whose deadline is less than
-- expiry_warning away are warned about once (an event, and a NOTIFY on
-- mesh_lifecycle whose payload names the run and the deadline, no more).
CREATE FUNCTION mesh.lifecycle_warn() RETURNS TABLE (run_id text, detail text)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
BEGIN
    FOR ws IN
        UPDATE mesh.workspaces w SET expiry_warned_at = now()
         WHERE w.status = 'pending' AND w.hibernated_until IS NOT NULL AND w.release_outcome IS NULL
           AND w.expiry_warned_at IS NULL
           AND w.hibernated_until < now() + (SELECT s.expiry_warning FROM mesh.settings s)
        RETURNING w.*
    LOOP
        PERFORM mesh.workspace_event(ws, 'expiry_warning', jsonb_build_object('hibernated_until', ws.hibernated_until));
        PERFORM pg_notify('mesh_lifecycle', jsonb_build_object('event', 'expiry_warning', 'run_id', ws.run_id,
                                                               'hibernated_until', ws.hibernated_until)::text);
        run_id := ws.run_id;
        detail := format('hibernated workspace expires at %s', ws.hibernated_until);
        RETURN NEXT;
    END LOOP;
END
$$;

-- The harness's call: keep run_id's hibernated workspace by more ("by")
-- past its retention deadline.  Recorded (event 'extended'); the warning
-- is due again before the new deadline.  Returns the new deadline.
CREATE FUNCTION @extschema@.mesh_extend(run_id text, by interval) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
BEGIN
    PERFORM mesh.require_args('mesh_extend', ARRAY['run_id', 'by'],
        ARRAY[mesh_extend.run_id IS NULL, mesh_extend.by IS NULL]);
    IF mesh_extend.by <= '0' THEN
        RAISE EXCEPTION 'mesh_extend: by must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = mesh_extend.run_id FOR UPDATE;
    IF ws.id IS NULL OR NOT mesh.may_drive(ws.owner_role, mesh.invoking_role()) THEN
        RAISE EXCEPTION 'run "%" is not declared', mesh_extend.run_id USING ERRCODE = 'undefined_object';
    END IF;
    IF ws.hibernated_until IS NULL OR ws.release_outcome IS NOT NULL OR ws.status IN ('released', 'failed') THEN
        RAISE EXCEPTION 'the workspace of run "%" has no retention deadline to extend (it is %)', mesh_extend.run_id,
                        CASE WHEN ws.release_outcome IS NOT NULL THEN 'released' ELSE ws.status::text END
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A workspace gets one when it is first hibernated.';
    END IF;
    UPDATE mesh.workspaces w SET hibernated_until = w.hibernated_until + mesh_extend.by, expiry_warned_at = NULL
     WHERE w.id = ws.id RETURNING w.hibernated_until INTO ws.hibernated_until;
    PERFORM mesh.workspace_event(ws, 'extended',
        jsonb_build_object('by', mesh_extend.by, 'hibernated_until', ws.hibernated_until,
                           'by_role', mesh.invoking_role()::regrole::text));
    RETURN ws.hibernated_until;
END
$$;

-- The admin's call: how long hibernated workspaces are kept, and how long
-- before their deadline the warning goes out.  NULL leaves one as it is.
CREATE FUNCTION mesh.set_lifecycle(hibernated_retention interval DEFAULT NULL, expiry_warning interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    UPDATE mesh.settings s SET hibernated_retention = coalesce(set_lifecycle.hibernated_retention, s.hibernated_retention),
                               expiry_warning = coalesce(set_lifecycle.expiry_warning, s.expiry_warning);
END
$$;
-- the worker's grants a fresh install gives every mesh function (90_privileges.sql)
REVOKE ALL ON FUNCTION mesh.invoking_role(), mesh.workspace_resume(text, text, oid), mesh.workspace_end_reason(mesh.workspaces),
                       mesh.workspace_lifecycle(), mesh.lifecycle_warn(), mesh.set_lifecycle(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.invoking_role(), mesh.workspace_resume(text, text, oid), mesh.workspace_end_reason(mesh.workspaces),
                          mesh.workspace_lifecycle(), mesh.lifecycle_warn(), mesh.set_lifecycle(interval, interval) TO mesh_worker;
-- resumable conversations (sql/src/15_lifecycle.sql)
REVOKE ALL ON FUNCTION @extschema@.mesh_resume(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_resume(text, text) TO mesh_harness, mesh_admin;
REVOKE ALL ON FUNCTION @extschema@.mesh_extend(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_extend(text, interval) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.set_lifecycle(interval, interval) TO mesh_admin;

------------------------------------------------------------------------------
-- Repository tokens (issue 31): sql/src/17_repositories.sql, and its privileges
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
        IF token IS NOT NULL THEN
            credential := NULL;     -- nothing to mint: the key is not handed out
        ELSE
            provider_kind := prov.provider;
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

-- Tokens whose revocation at the provider is pending, with what revoking needs (the broker's round).
CREATE FUNCTION mesh.repository_tokens_to_revoke(p_limit integer)
RETURNS TABLE (id bigint, provider_kind text, api_url text, token text)
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT t.id, p.provider, p.api_url, t.token
      FROM mesh.repository_tokens t JOIN mesh.repository_providers p ON p.name = t.provider
     WHERE t.revoke_outcome = 'pending' ORDER BY t.id LIMIT p_limit
$$;

-- privileges as sql/src/90_privileges.sql gives them on a fresh install
REVOKE ALL ON mesh.repository_providers, mesh.repository_provider_credentials, mesh.repositories,
              mesh.repository_tokens FROM PUBLIC;
REVOKE ALL ON SEQUENCE mesh.repository_tokens_id_seq FROM PUBLIC;
REVOKE ALL ON FUNCTION mesh.repository_permissions_valid(jsonb),
                       mesh.repository_permissions_within(jsonb, jsonb),
                       mesh.repository_provider_set(text, text, text, text, text, text),
                       mesh.repository_provider_set_credential(text, text),
                       mesh.repository_register(text, text, jsonb),
                       mesh.repository_grant(text, text, jsonb),
                       mesh.repository_token_minted(text, text, text, timestamptz, jsonb, integer, text),
                       mesh.repository_token_revoked(bigint, text),
                       mesh.repository_tokens_end_with_run(),
                       mesh.run_repository_tokens(text),
                       mesh.broker_repository_token(bytea, text, text, text),
                       mesh.repository_tokens_to_revoke(integer) FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON mesh.repository_providers, mesh.repository_provider_credentials,
                                mesh.repositories, mesh.repository_tokens TO mesh_worker;
GRANT USAGE ON SEQUENCE mesh.repository_tokens_id_seq TO mesh_worker;
GRANT EXECUTE ON FUNCTION mesh.repository_permissions_valid(jsonb),
                          mesh.repository_permissions_within(jsonb, jsonb),
                          mesh.repository_provider_set(text, text, text, text, text, text),
                          mesh.repository_provider_set_credential(text, text),
                          mesh.repository_register(text, text, jsonb),
                          mesh.repository_grant(text, text, jsonb),
                          mesh.repository_token_minted(text, text, text, timestamptz, jsonb, integer, text),
                          mesh.repository_token_revoked(bigint, text),
                          mesh.repository_tokens_end_with_run(),
                          mesh.run_repository_tokens(text),
                          mesh.broker_repository_token(bytea, text, text, text),
                          mesh.repository_tokens_to_revoke(integer) TO mesh_worker;
-- Repositories (issue 31): admins name providers, set their credential (write-only), register
-- repositories and grant them to runs; nobody but the workers reads a credential or a token.
GRANT SELECT ON mesh.repository_providers, mesh.repositories TO mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.repository_provider_set(text, text, text, text, text, text),
                          mesh.repository_provider_set_credential(text, text),
                          mesh.repository_register(text, text, jsonb),
                          mesh.repository_grant(text, text, jsonb),
                          mesh.run_repository_tokens(text)
      TO mesh_admin;

------------------------------------------------------------------------------
-- mesh_eval and the isolate backend (issue 33): sql/src/16_eval.sql, grants as in 90_privileges.sql
------------------------------------------------------------------------------
-- The evaluation is an exec of the run (its row in mesh.execs first, budgets
-- charged, cancellable, ownership enforced) whose argv is [language, code] and
-- whose stdin is the input as JSON; the worker sends it only to a backend that
-- declares eval, and refuses it before any backend call otherwise.
CREATE FUNCTION mesh.eval_call(run_id text, argv text[], dir text DEFAULT NULL,
                               stdin bytea DEFAULT NULL, timeout interval DEFAULT NULL,
                               env jsonb DEFAULT NULL)
RETURNS TABLE (exit_code integer, stdout text, stderr text, status text,
               truncated boolean, exec_id bigint,
               stdout_bytes bigint, stderr_bytes bigint)
    AS 'MODULE_PATHNAME', 'mesh_eval_call' LANGUAGE C ROWS 1;

-- The value (JSON), the console output, the error (NULL when it returned a
-- value), the time the isolate took and the exec's status and id.
CREATE FUNCTION @extschema@.mesh_eval(run_id text, language text, code text,
                                      input jsonb DEFAULT NULL, timeout interval DEFAULT NULL)
RETURNS TABLE (value jsonb, stdout text, error text, duration_ms double precision,
               status text, exec_id bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    r record;
    doc jsonb;
BEGIN
    PERFORM mesh.require_args('mesh_eval', ARRAY['run_id', 'language', 'code'],
                              ARRAY[mesh_eval.run_id IS NULL, mesh_eval.language IS NULL, mesh_eval.code IS NULL]);
    IF language <> 'javascript' THEN
        RAISE EXCEPTION 'mesh_eval: language "%" is not offered', language
              USING ERRCODE = 'feature_not_supported', HINT = 'The isolate backend evaluates javascript only.';
    END IF;
    SELECT * INTO r FROM mesh.eval_call(run_id, ARRAY[language, code], NULL,
                                        CASE WHEN input IS NULL THEN NULL ELSE convert_to(input::text, 'UTF8') END,
                                        timeout, NULL);
    -- an answer over the exec's output bound is stored cut (mesh.execs keeps it): say so
    BEGIN
        doc := r.stdout::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        doc := jsonb_build_object('error', format('evaluation stopped: output over the bound of %s bytes (the answer is kept, cut, in mesh.execs)',
                                                  length(r.stdout)));
    END;
    value := doc->'value';
    stdout := doc->>'stdout';
    error := doc->>'error';
    duration_ms := (doc->>'duration_ms')::double precision;
    status := r.status;
    exec_id := r.exec_id;
    RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION mesh.eval_call(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_eval(text, text, text, jsonb, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.eval_call(text, text[], text, bytea, interval, jsonb),
                          @extschema@.mesh_eval(text, text, text, jsonb, interval) TO mesh_harness, mesh_admin;
-- a fresh install grants every mesh function to the workers
GRANT EXECUTE ON FUNCTION mesh.eval_call(text, text[], text, bytea, interval, jsonb) TO mesh_worker;

------------------------------------------------------------------------------
-- Checking out a repository (issue 31, second half): sql/src/18_checkout.sql, and its privileges
------------------------------------------------------------------------------
-- Where git reaches a provider's repositories: https://<host> unless set
-- (a test's loopback server speaks plain http).
ALTER TABLE mesh.repository_providers ADD COLUMN git_url text
    CHECK (git_url ~ '^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$');

-- An admin sets the clone base of a provider (NULL or omitted: https://<host>).  Its host must be the
-- provider's host: the credential helper asks the broker for the host git names, and the
-- broker offers a token only to its own host.
CREATE FUNCTION mesh.repository_provider_set_git_url(name text, git_url text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    prov mesh.repository_providers;
BEGIN
    PERFORM mesh.require_args('repository_provider_set_git_url', ARRAY['name'],
        ARRAY[repository_provider_set_git_url.name IS NULL]);
    SELECT * INTO prov FROM mesh.repository_providers p WHERE p.name = repository_provider_set_git_url.name;
    IF prov.name IS NULL THEN
        RAISE EXCEPTION 'repository provider "%" does not exist', repository_provider_set_git_url.name
            USING ERRCODE = 'undefined_object', HINT = 'Create it with mesh.repository_provider_set.';
    END IF;
    IF git_url IS NOT NULL AND substring(git_url FROM '^https?://([^/]+)') IS DISTINCT FROM prov.host THEN
        RAISE EXCEPTION 'git_url must name the provider''s host %', prov.host
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE mesh.repository_providers p SET git_url = repository_provider_set_git_url.git_url, updated_at = now()
     WHERE p.name = prov.name;
END
$$;

-- True when the workspace egress EGRESS (as mesh.workspace_egress captured it) lets the
-- sandbox reach HOST (a port is ignored): open mode, or a listed domain (exact or "*."
-- wildcard); an IP address never matches a list (the proxy refuses raw IPs there).
CREATE FUNCTION mesh.egress_allows_host(egress jsonb, host text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT egress->>'mode' = 'open'
        OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(egress->'domains', '[]')) d
                    WHERE lower(split_part(host, ':', 1)) = d
                       OR (d LIKE '*.%' AND lower(split_part(host, ':', 1)) LIKE '%' || substr(d, 2)))
$$;

-- What mesh_checkout needs, and its refusals before any backend call: the caller may drive
-- the run, the run holds a live grant for the repository, its egress reaches the host and
-- its backend (once chosen) declares shell.  Returns the clone URL and the git identity.
CREATE FUNCTION mesh.checkout_plan(p_run_id text, p_repository text,
                                   OUT clone_url text, OUT host text, OUT agent_id text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    prov mesh.repository_providers;
    egress jsonb;
BEGIN
    PERFORM mesh.require_args('checkout_plan', ARRAY['p_run_id', 'p_repository'],
        ARRAY[p_run_id IS NULL, p_repository IS NULL]);
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = p_run_id AND w.status <> 'released';
    IF ws.run_id IS NULL OR NOT mesh.may_drive(ws.owner_role, mesh.invoking_role()) THEN
        RAISE EXCEPTION 'run "%" is unknown or released', p_run_id
            USING ERRCODE = 'undefined_object', HINT = 'Acquire it first with mesh_acquire.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM mesh.grants g WHERE g.run_id = p_run_id AND g.kind = 'repository'
                      AND g.name = p_repository AND g.revoked_at IS NULL) THEN
        RAISE EXCEPTION 'run "%" has no grant for repository "%"', p_run_id, p_repository
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An admin grants it with mesh.repository_grant(run_id, repository, permissions).';
    END IF;
    SELECT p.* INTO prov FROM mesh.repositories r JOIN mesh.repository_providers p ON p.name = r.provider
     WHERE r.repository = p_repository;
    -- the captured policy once materialized; before, what materialization would capture
    egress := coalesce(ws.egress, CASE WHEN egress_policy_saved()->>'mode' = 'open' THEN '{"mode": "open"}'::jsonb
              ELSE jsonb_build_object('mode', 'allowlist', 'domains',
                       to_jsonb(egress_default_domains()) || (egress_policy_saved()->'domains')) END);
    IF NOT egress_allows_host(egress, prov.host) THEN
        RAISE EXCEPTION 'the egress policy of run "%" does not let its sandbox reach %', p_run_id, prov.host
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An admin adds the host to the allowlist with mesh.set_egress_policy(); it applies to runs acquired afterwards.';
    END IF;
    IF ws.capabilities IS NOT NULL AND NOT coalesce((ws.capabilities->>'shell')::boolean, false) THEN
        RAISE EXCEPTION 'backend "%" cannot run git (it does not declare the shell capability)', ws.backend_kind
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Check out in a run of an agent pinned to a backend with the shell capability.';
    END IF;
    clone_url := coalesce(prov.git_url, 'https://' || prov.host) || '/' || p_repository || '.git';
    host := prov.host;
    agent_id := ws.agent_id;
END
$$;

-- The git credential helper mesh_checkout writes into the workspace: on "get" it asks the
-- broker (its unix socket, the run token in a header read from stdin, not argv) for the
-- token of the host and repository git names and answers it; for anything the broker
-- refuses (another host, an ungranted repository) it answers nothing.
CREATE FUNCTION mesh.checkout_credential_helper() RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $helper$
    SELECT $$#!/bin/sh
# git credential helper written by mesh_checkout: the repository token from the run's broker at use time
[ "$1" = get ] || exit 0
host= path=
while IFS= read -r line && [ -n "$line" ]; do
  case $line in host=*) host=${line#host=} ;; path=*) path=${line#path=} ;; esac
done
path=${path%.git}
case $path in */*/* | /* | *..*) exit 0 ;; ?*/?*) ;; *) exit 0 ;; esac
case $host in *[!A-Za-z0-9.:-]* | '') exit 0 ;; esac
answer=$(printf 'Authorization: Bearer %s\n' "$(cat /workspace/.mesh/run-token)" |
  curl -s -m 15 --unix-socket /run/mesh/broker.sock -X POST -H @- "http://mesh/v1/repositories/$host/$path/token") || exit 0
password=$(printf %s "$answer" | sed -n 's/.*"password": *"\([^"]*\)".*/\1/p')
[ -n "$password" ] || exit 0
printf 'username=x-access-token\npassword=%s\n' "$password"
$$
$helper$;

-- Clones REPOSITORY into /workspace/<name> of the run (or fetches, when it is there), git
-- committing as the run's agent, on BRANCH (created from the default branch when it does
-- not exist; the default branch when NULL).  Every step is an exec of the run, recorded in
-- mesh.execs like any other; the refusals come first, before any backend call.
CREATE FUNCTION @extschema@.mesh_checkout(run_id text, repository text, branch text DEFAULT NULL,
                                          OUT commit_sha text, OUT checked_out_branch text, OUT path text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    plan record;
    helper constant text := '/workspace/.mesh/git-credential-mesh';
    env constant jsonb := '{"GIT_TERMINAL_PROMPT": "0"}';
    r record;
BEGIN
    PERFORM mesh.require_args('mesh_checkout', ARRAY['run_id', 'repository'],
        ARRAY[mesh_checkout.run_id IS NULL, mesh_checkout.repository IS NULL]);
    IF branch IS NOT NULL AND branch !~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$' OR branch ~ '\.\.|//|\.lock$|/$' THEN
        RAISE EXCEPTION 'branch "%" is not a branch name this checkout accepts', branch
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Letters, digits, ".", "_", "-" and "/".';
    END IF;
    plan := mesh.checkout_plan(mesh_checkout.run_id, mesh_checkout.repository);
    path := '/workspace/' || split_part(mesh_checkout.repository, '/', 2);
    -- 1: the helper (the backend's declared capabilities are checked by the exec path first)
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id,
        ARRAY['sh', '-c', 'umask 077 && mkdir -p "${1%/*}" && cat > "$1" && chmod 700 "$1"', 'sh', helper],
        stdin => convert_to(mesh.checkout_credential_helper(), 'UTF8'));
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": writing the credential helper failed (exit %): %', repository, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception', HINT = format('mesh.execs row %s.', r.exec_id);
    END IF;
    -- 2: clone (or fetch), the helper configured in the clone, the agent's identity
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id, ARRAY['sh', '-c',
        'set -e; url=$1 dir=$2 helper=$3 name=$4
         if [ -d "$dir/.git" ]; then git -C "$dir" fetch -q origin
         else git -c credential.helper="$helper" -c credential.useHttpPath=true clone -q -- "$url" "$dir"; fi
         git -C "$dir" config credential.helper "$helper"
         git -C "$dir" config credential.useHttpPath true
         git -C "$dir" config user.name "$name"
         git -C "$dir" config user.email "$name@agents.mesh.invalid"',
        'sh', plan.clone_url, path, helper, plan.agent_id], env => env);
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": git clone failed (exit %): %', repository, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception',
                  HINT = format('mesh.execs row %s; the broker''s refusals are events of the run.', r.exec_id);
    END IF;
    -- 3: the working branch, brought up to what was fetched when it only moved forward (a
    -- clone a snapshot brought stands on the commit of its day; an agent's own commits on
    -- it are never thrown away); a new branch starts from the remote's default branch
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id, ARRAY['sh', '-c',
        'set -e; cd "$1"
         default=$(git symbolic-ref -q --short refs/remotes/origin/HEAD || true)
         if [ -n "$2" ]; then
           if git rev-parse -q --verify "refs/heads/$2" >/dev/null || git rev-parse -q --verify "refs/remotes/origin/$2" >/dev/null
           then git checkout -q "$2"; else git checkout -q --no-track -b "$2" $default; fi
           upstream=origin/$2
         else
           [ -z "$default" ] || git checkout -q "${default#origin/}"
           upstream=$default
         fi
         if [ -n "$upstream" ] && git rev-parse -q --verify "refs/remotes/$upstream" >/dev/null; then
           git merge -q --ff-only "$upstream" 2>/dev/null || echo "mesh_checkout: $upstream is not a fast-forward of the branch: left as it was" >&2
         fi
         git rev-parse HEAD; git rev-parse --abbrev-ref HEAD',
        'sh', path, coalesce(branch, '')], env => env);
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": checking out branch % failed (exit %): %', repository, branch, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception', HINT = format('mesh.execs row %s.', r.exec_id);
    END IF;
    commit_sha := split_part(r.stdout, E'\n', 1);
    checked_out_branch := split_part(r.stdout, E'\n', 2);
END
$$;

-- checking out a repository (sql/src/18_checkout.sql): the harness checks out, the admin sets a clone base
REVOKE ALL ON FUNCTION @extschema@.mesh_checkout(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION mesh.repository_provider_set_git_url(text, text), mesh.egress_allows_host(jsonb, text),
                        mesh.checkout_plan(text, text), mesh.checkout_credential_helper() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_checkout(text, text, text),
                          mesh.checkout_plan(text, text),
                          mesh.checkout_credential_helper() TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.repository_provider_set_git_url(text, text) TO mesh_admin;
-- a fresh install grants every mesh function to the workers
GRANT EXECUTE ON FUNCTION mesh.repository_provider_set_git_url(text, text), mesh.egress_allows_host(jsonb, text),
                          mesh.checkout_plan(text, text), mesh.checkout_credential_helper() TO mesh_worker;
-- ---- the embedded isolate host (issue 33, supervision): sql/src/16_eval.sql ----
INSERT INTO mesh.backends (name, driver, enabled, catalog_order, config)
SELECT 'isolate', 'isolate', true, 1000, '{"embedded": true}'
 WHERE coalesce(current_setting('mesh.embedded_isolated', true), 'off') = 'on'
   AND NOT EXISTS (SELECT 1 FROM mesh.backends b WHERE b.name = 'isolate');

-- ---- declared capabilities in the catalog: sql/src/02_internal.sql, 08_views.sql ----
-- What a driver declares for a backend of this config (no backend call): the capabilities
-- JSON a workspace row records; NULL for a driver this build does not have.
CREATE FUNCTION mesh.driver_capabilities(driver text, config jsonb) RETURNS jsonb
    AS 'MODULE_PATHNAME', 'mesh_driver_capabilities' LANGUAGE C STRICT STABLE;
CREATE OR REPLACE VIEW mesh.backend_catalog AS
SELECT b.name, b.driver, b.enabled, b.catalog_order, b.config, b.max_size,
       (c.backend IS NOT NULL) AS has_credential, c.set_at AS credential_set_at,
       b.created_at, b.updated_at,
       -- declared, not discovered: what a run on it may ask (shell, eval, snapshot, ...)
       mesh.driver_capabilities(b.driver, b.config) AS capabilities
  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name;
REVOKE ALL ON FUNCTION mesh.driver_capabilities(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.driver_capabilities(text, jsonb) TO mesh_admin;
-- a fresh install grants every mesh function to the workers
GRANT EXECUTE ON FUNCTION mesh.driver_capabilities(text, jsonb) TO mesh_worker;

-- ---- lifecycle: an administrator's release ends a run with end_reason 'admin': sql/src/06_worker_moves.sql ----
DROP FUNCTION mesh.workspace_begin_release(bigint, text);
-- The move to releasing, committed before the backend is asked.  A failed
-- workspace stays failed (terminal, with its reason) while released.  The
-- caller (NULL for the reaper and the worker's own releases) decides the end
-- reason when it is an administrator ending another role's run: 'admin'
-- (sql/src/15_lifecycle.sql), kept by the move to released.
CREATE FUNCTION mesh.workspace_begin_release(p_id bigint, p_reason text, p_caller oid) RETURNS mesh.workspace_status
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending,acquiring,ready,releasing,failed}', 'begin a release');
BEGIN
    IF ws.release_outcome IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'begin a release');
    END IF;
    UPDATE mesh.workspaces w SET status = CASE WHEN w.status = 'failed' THEN w.status ELSE 'releasing' END,
           release_reason = coalesce(p_reason, w.release_reason),
           end_reason = CASE WHEN w.ended_at IS NULL AND mesh.released_by_admin(w.owner_role, p_caller)
                             THEN 'admin' ELSE w.end_reason END
     WHERE w.id = p_id RETURNING w.status INTO ws.status;
    RETURN ws.status;
END
$$;

-- Is caller an administrator (mesh_admin's member) ending the run of a role
-- it is not a member of?  Not when run ownership is off: every harness role
-- then drives every run as its own.
CREATE FUNCTION mesh.released_by_admin(owner regrole, caller oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT caller IS NOT NULL AND owner IS NOT NULL AND s.run_ownership
           AND pg_has_role(caller, 'mesh_admin', 'MEMBER') AND NOT pg_has_role(caller, owner::oid, 'MEMBER')
      FROM mesh.settings s
$$;
REVOKE ALL ON FUNCTION mesh.workspace_begin_release(bigint, text, oid), mesh.released_by_admin(regrole, oid) FROM PUBLIC;
-- a fresh install grants every mesh function to the workers
GRANT EXECUTE ON FUNCTION mesh.workspace_begin_release(bigint, text, oid), mesh.released_by_admin(regrole, oid) TO mesh_worker;

-- ---- GitLab project access tokens: sql/src/17_repositories.sql, 18_checkout.sql ----
-- The broker learns the provider's kind with every token it hands (git's user name: oauth2
-- for GitLab, x-access-token for GitHub).
CREATE OR REPLACE FUNCTION mesh.broker_repository_token(p_token_sha256 bytea, p_host text, p_repository text,
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
-- The revocation round gets what GitLab's revocation needs (a new result type: dropped first).
DROP FUNCTION mesh.repository_tokens_to_revoke(integer);
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
-- The reaper ends the tokens past their expiry.
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
-- The credential helper answers the user name the broker says.
CREATE OR REPLACE FUNCTION mesh.checkout_credential_helper() RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $helper$
    SELECT $$#!/bin/sh
# git credential helper written by mesh_checkout: the repository token from the run's broker at use time
[ "$1" = get ] || exit 0
host= path=
while IFS= read -r line && [ -n "$line" ]; do
  case $line in host=*) host=${line#host=} ;; path=*) path=${line#path=} ;; esac
done
path=${path%.git}
case $path in */*/* | /* | *..*) exit 0 ;; ?*/?*) ;; *) exit 0 ;; esac
case $host in *[!A-Za-z0-9.:-]* | '') exit 0 ;; esac
answer=$(printf 'Authorization: Bearer %s\n' "$(cat /workspace/.mesh/run-token)" |
  curl -s -m 15 --unix-socket /run/mesh/broker.sock -X POST -H @- "http://mesh/v1/repositories/$host/$path/token") || exit 0
password=$(printf %s "$answer" | sed -n 's/.*"password": *"\([^"]*\)".*/\1/p')
username=$(printf %s "$answer" | sed -n 's/.*"username": *"\([A-Za-z0-9._-]*\)".*/\1/p')
[ -n "$password" ] && [ -n "$username" ] || exit 0
printf 'username=%s\npassword=%s\n' "$username" "$password"
$$
$helper$;
REVOKE ALL ON FUNCTION mesh.repository_tokens_to_revoke(integer), mesh.repository_tokens_expire() FROM PUBLIC;
-- a fresh install grants every mesh function to the workers
GRANT EXECUTE ON FUNCTION mesh.repository_tokens_to_revoke(integer), mesh.repository_tokens_expire() TO mesh_worker;

-- ---- extending a running command's timeout: sql/src/14_background.sql ----
-- Move a running command's deadline (foreground or background) later by "by"; its new
-- deadline.  Refused before any backend call when the backend does not declare
-- extend_timeout (0A000), or past 7 days, the run's budget or its lifetime bound (53400);
-- recorded (mesh.execs.timeout_ms, an exec_extended event).
CREATE FUNCTION @extschema@.mesh_exec_extend(exec_id bigint, by interval)
RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'mesh_exec_extend' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_extend(bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_extend(bigint, interval) TO mesh_harness, mesh_admin;

-- ---- mesh_extend of a live workspace moves its run's lifetime bound: sql/src/01_catalog.sql,
-- 04_admin.sql (mesh.run_limits), 15_lifecycle.sql ----
ALTER TABLE mesh.run_budgets
    -- mesh_extend of a live workspace: added to mesh.settings.max_run_lifetime for this run
    ADD COLUMN lifetime_extension  interval NOT NULL DEFAULT '0' CHECK (lifetime_extension >= '0');
CREATE OR REPLACE VIEW mesh.run_limits AS
SELECT w.id AS workspace_id, w.run_id, w.agent_id,
       coalesce(rb.max_compute_seconds, a.max_compute_seconds, s.max_compute_seconds) AS max_compute_seconds,
       coalesce(rb.idle_timeout, a.idle_timeout, s.idle_timeout) AS idle_timeout,
       a.max_concurrent_workspaces,
       -- mesh_extend of a live workspace moves its run's bound
       s.max_run_lifetime + coalesce(rb.lifetime_extension, '0') AS max_run_lifetime
  FROM mesh.workspaces w
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = w.agent_id
  LEFT JOIN mesh.run_budgets rb ON rb.run_id = w.run_id;

-- The harness's call: keep run_id's workspace by more ("by").  A live one
-- (ready) has its run's lifetime bound (mesh.settings.max_run_lifetime from its
-- creation) moved, and its run token's expiry with it; a hibernated one its
-- retention deadline (the warning due again before it).  Recorded (event
-- 'extended').  Returns the new deadline.
CREATE OR REPLACE FUNCTION @extschema@.mesh_extend(run_id text, by interval) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    lifetime_until timestamptz;
BEGIN
    PERFORM mesh.require_args('mesh_extend', ARRAY['run_id', 'by'],
        ARRAY[mesh_extend.run_id IS NULL, mesh_extend.by IS NULL]);
    IF mesh_extend.by <= '0' THEN
        RAISE EXCEPTION 'mesh_extend: by must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = mesh_extend.run_id FOR UPDATE;
    IF ws.id IS NULL OR NOT mesh.may_drive(ws.owner_role, mesh.invoking_role()) THEN
        RAISE EXCEPTION 'run "%" is not declared', mesh_extend.run_id USING ERRCODE = 'undefined_object';
    END IF;
    IF ws.status = 'ready' AND ws.release_outcome IS NULL THEN
        INSERT INTO mesh.run_budgets AS b (run_id, lifetime_extension) VALUES (ws.run_id, mesh_extend.by)
        ON CONFLICT ON CONSTRAINT run_budgets_pkey DO UPDATE
           SET lifetime_extension = b.lifetime_extension + mesh_extend.by, set_at = now();
        UPDATE mesh.run_tokens t SET expires_at = t.expires_at + mesh_extend.by
         WHERE t.run_id = ws.run_id AND t.revoked_at IS NULL;
        SELECT ws.created_at + l.max_run_lifetime INTO lifetime_until FROM mesh.run_limits l WHERE l.workspace_id = ws.id;
        PERFORM mesh.workspace_event(ws, 'extended',
            jsonb_build_object('by', mesh_extend.by, 'lifetime_until', lifetime_until,
                               'by_role', mesh.invoking_role()::regrole::text));
        RETURN lifetime_until;
    END IF;
    IF ws.hibernated_until IS NULL OR ws.release_outcome IS NOT NULL OR ws.status IN ('released', 'failed') THEN
        RAISE EXCEPTION 'the workspace of run "%" has no retention deadline to extend (it is %)', mesh_extend.run_id,
                        CASE WHEN ws.release_outcome IS NOT NULL THEN 'released' ELSE ws.status::text END
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A live workspace''s run has a lifetime bound; a hibernated one a retention deadline.';
    END IF;
    UPDATE mesh.workspaces w SET hibernated_until = w.hibernated_until + mesh_extend.by, expiry_warned_at = NULL
     WHERE w.id = ws.id RETURNING w.hibernated_until INTO ws.hibernated_until;
    PERFORM mesh.workspace_event(ws, 'extended',
        jsonb_build_object('by', mesh_extend.by, 'hibernated_until', ws.hibernated_until,
                           'by_role', mesh.invoking_role()::regrole::text));
    RETURN ws.hibernated_until;
END
$$;

-- ---- mesh.stat_workers.wal_flushes, the WAL flushes each worker's turns waited for: sql/src/21_stats.sql ----
DROP VIEW mesh.stat_workers;
DROP FUNCTION mesh.stat_get_workers();
-- Per worker: its pid (NULL while not running), calls waiting in its queue and
-- in progress, its busy time (awake in its loop), calls it ended, the WAL
-- flushes its turns waited for (group commit: fewer than its calls under
-- concurrency), when it last took or ended one.
CREATE FUNCTION mesh.stat_get_workers()
RETURNS TABLE (worker integer, pid integer, queue_depth integer, calls_in_flight integer,
               busy_time double precision, calls bigint, wal_flushes bigint,
               last_activity timestamptz, stats_reset timestamptz)
    AS 'MODULE_PATHNAME', 'mesh_stat_workers' LANGUAGE C VOLATILE;
CREATE VIEW mesh.stat_workers AS
SELECT worker, pid, queue_depth, calls_in_flight, busy_time, calls, wal_flushes, last_activity, stats_reset
  FROM mesh.stat_get_workers();
REVOKE ALL ON FUNCTION mesh.stat_get_workers() FROM PUBLIC;
REVOKE ALL ON mesh.stat_workers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.stat_get_workers() TO mesh_admin, pg_monitor;
GRANT SELECT ON mesh.stat_workers TO mesh_admin, pg_monitor;
-- a fresh install grants every mesh function and table (views included) to the workers
GRANT EXECUTE ON FUNCTION mesh.stat_get_workers() TO mesh_worker;
GRANT SELECT, INSERT, UPDATE ON mesh.stat_workers TO mesh_worker;
