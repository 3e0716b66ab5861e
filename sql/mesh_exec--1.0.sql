/* mesh_exec--1.0.sql: schema, roles and SQL API of mesh_exec, made by the Makefile from sql/src/NN_*.sql */

\echo Use "CREATE EXTENSION mesh_exec" to load this file. \quit

-- Roles are cluster-wide: create them once, never drop them with the extension.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mesh_admin') THEN
        CREATE ROLE mesh_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mesh_harness') THEN
        CREATE ROLE mesh_harness NOLOGIN;
    END IF;
    -- what the background workers' statements run as (docs/security.md)
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mesh_worker') THEN
        CREATE ROLE mesh_worker NOLOGIN;
    END IF;
END
$roles$;

CREATE SCHEMA mesh;
REVOKE ALL ON SCHEMA mesh FROM PUBLIC;
COMMENT ON SCHEMA mesh IS 'mesh_exec: workspaces, execs, backends and events';

CREATE TYPE mesh.size_tier AS ENUM ('small', 'standard', 'large', 'xlarge');
CREATE TYPE mesh.workspace_status AS ENUM
    ('pending', 'acquiring', 'ready', 'releasing', 'released', 'failed');
CREATE TYPE mesh.exec_status AS ENUM
    ('running', 'ok', 'timeout', 'cancelled', 'oom', 'budget_exhausted', 'error', 'killed');
-- Why a workspace is in its status, as a code; status_reason is its sentence
-- (mesh.status_reason_text), or a backend's own words where no code fits.
CREATE TYPE mesh.status_reason_code AS ENUM
    ('acquire_interrupted', 'acquire_failed', 'hibernated_idle', 'hibernated_by_backend',
     'found_running', 'lost', 'budget_exhausted', 'release_stuck');

-- Catalog of configured backends: runtime configuration, never environment.
CREATE TABLE mesh.backends (
    name          text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    driver        text NOT NULL,
    enabled       boolean NOT NULL DEFAULT true,
    catalog_order integer NOT NULL DEFAULT 100,
    config        jsonb NOT NULL DEFAULT '{}',
    max_size      mesh.size_tier NOT NULL DEFAULT 'xlarge',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Credentials live apart so no view or grant can reach them by accident.
CREATE TABLE mesh.backend_credentials (
    backend    text PRIMARY KEY REFERENCES mesh.backends (name) ON DELETE CASCADE,
    credential text NOT NULL,
    set_at     timestamptz NOT NULL DEFAULT now()
);

-- Per-agent settings and budgets (NULL: the instance policy applies).
CREATE TABLE mesh.agents (
    agent_id     text PRIMARY KEY,
    backend      text REFERENCES mesh.backends (name) ON DELETE SET NULL,
    default_size mesh.size_tier,
    max_compute_seconds       double precision CHECK (max_compute_seconds > 0),  -- per run
    max_concurrent_workspaces integer CHECK (max_concurrent_workspaces > 0),
    idle_timeout              interval CHECK (idle_timeout > '0'),
    -- OOM-aware tier climb in force: a run that ran out of memory at tier T
    -- gives the agent's next runs T+1 (mesh.tier_climb_on_oom), until
    -- settings.tier_climb_reset_runs clean runs at that tier reset it.
    climbed_size              mesh.size_tier,
    climbed_at                timestamptz,
    clean_runs_since_climb    integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- run ownership: when a role first claimed the agent or an admin first granted it
    -- (mesh.agent_roles); from then on nobody claims it
    access_set_at             timestamptz
);

-- Run ownership: the roles (and their members) that may declare runs under
-- an agent: the one that claimed it by declaring its first run, and those an
-- admin granted it to (mesh.agent_grant).
CREATE TABLE mesh.agent_roles (
    agent_id   text NOT NULL,
    role_oid   regrole NOT NULL,
    how        text NOT NULL CHECK (how IN ('claimed', 'granted')),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, role_oid)
);

-- Per-run overrides of the agent's budget.
CREATE TABLE mesh.run_budgets (
    run_id              text PRIMARY KEY,
    max_compute_seconds double precision CHECK (max_compute_seconds > 0),
    idle_timeout        interval CHECK (idle_timeout > '0'),
    set_at              timestamptz NOT NULL DEFAULT now()
);

-- Instance policy: one row.
CREATE TABLE mesh.settings (
    singleton           boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    max_run_lifetime    interval NOT NULL DEFAULT '24 hours' CHECK (max_run_lifetime > '0'),
    idle_timeout        interval NOT NULL DEFAULT '1 hour' CHECK (idle_timeout > '0'),
    max_compute_seconds double precision CHECK (max_compute_seconds > 0),
    run_ownership       boolean NOT NULL DEFAULT true,   -- a harness role sees and drives only its own runs, agents and snapshots
    -- clean runs at a climbed tier after which an agent's climb is reset
    tier_climb_reset_runs integer NOT NULL DEFAULT 3 CHECK (tier_climb_reset_runs > 0),
    -- background commands (mesh_exec_start) one run may have running at once
    max_background_per_run integer NOT NULL DEFAULT 16 CHECK (max_background_per_run > 0)
);
INSERT INTO mesh.settings DEFAULT VALUES;
-- One row, for good: the planner is told so once (never analyzed, it would guess a
-- thousand rows for every query that joins it, run_limits' users among them).
ANALYZE mesh.settings;

-- Project-state snapshots (mesh_snapshot, 11_snapshots.sql): the table comes before the
-- workspaces, whose rows say which snapshot they stand on.
CREATE TYPE mesh.snapshot_status AS ENUM ('capturing', 'ready', 'retired', 'reclaimed', 'failed');

-- A project is a key the harness chooses (a repository name, say), never a
-- path: letters, digits and . _ / @ : + -, no ".." or "//", at most 200.
-- In C: the CHECKs of mesh.workspaces and mesh.snapshots run it on every update
-- of a row with a project.
CREATE FUNCTION mesh.project_name_valid(p text) RETURNS boolean
    AS 'MODULE_PATHNAME', 'mesh_project_name_valid' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- A row id nobody can guess or count through: 63 random bits (of a v4 UUID's
-- random part; no pgcrypto needed).
CREATE FUNCTION mesh.random_id() RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || right(replace(gen_random_uuid()::text, '-', ''), 16))::bit(64)::bigint & 9223372036854775807
$$;

CREATE TABLE mesh.snapshots (
    id              bigint PRIMARY KEY DEFAULT mesh.random_id(),  -- not a sequence: ids are not enumerable
    project         text NOT NULL CHECK (mesh.project_name_valid(project)),
    backend         text NOT NULL,        -- catalog name of the backend that holds it
    external_ref    text,                 -- opaque: only its driver parses it; recorded before the backend call
    status          mesh.snapshot_status NOT NULL DEFAULT 'capturing',
    status_reason   text,                 -- why it failed, or what retired it
    size_bytes      bigint CHECK (size_bytes >= 0),
    file_count      bigint CHECK (file_count >= 0),
    source_run_id   text NOT NULL,
    actor_id        text NOT NULL CHECK (actor_id <> ''),
    created_at      timestamptz NOT NULL DEFAULT now(),
    ready_at        timestamptz,
    retired_at      timestamptz,
    reclaimed_at    timestamptz,
    owner_role      regrole,              -- the owner of the run it was captured from (run ownership)
    UNIQUE (backend, external_ref),
    CHECK (status IN ('capturing', 'failed') OR ready_at IS NOT NULL),
    CHECK (status <> 'failed' OR status_reason IS NOT NULL)
);
-- a project's current snapshot on a backend, per owner (two owners naming one project
-- never share state): at most one ready
CREATE UNIQUE INDEX snapshots_current_idx ON mesh.snapshots (project, backend, coalesce(owner_role, 0::oid))
    WHERE status = 'ready';
CREATE INDEX snapshots_retired_idx ON mesh.snapshots (backend, retired_at) WHERE status = 'retired';
CREATE INDEX snapshots_capturing_idx ON mesh.snapshots (backend, created_at) WHERE status = 'capturing';

-- One workspace per run, at most.  Written only by mesh workers.
CREATE TABLE mesh.workspaces (
    id                  bigserial PRIMARY KEY,
    run_id              text NOT NULL UNIQUE CHECK (run_id <> ''),
    parent_run_id       text,
    agent_id            text NOT NULL CHECK (agent_id <> ''),
    environment         text,            -- what it declared it needs (mesh.environments)
    created_by_actor_id text NOT NULL CHECK (created_by_actor_id <> ''),
    status              mesh.workspace_status NOT NULL DEFAULT 'pending',
    status_reason       text,
    backend_kind        text,            -- catalog name recorded at materialization
    external_ref        text,            -- opaque: only its backend parses it
    size                mesh.size_tier,
    capabilities        jsonb,
    egress              jsonb,           -- network policy captured at materialization (mesh.workspace_egress)
    release_outcome     text CHECK (release_outcome IN
                          ('destroyed', 'hibernated', 'never materialized', 'must be released by hand')),
    release_reason      text,
    compute_seconds     double precision NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    materialized_at     timestamptz,
    last_used_at        timestamptz,
    released_at         timestamptz,
    owner_role          regrole,         -- the role that declared the run (current_user of mesh_acquire)
    status_reason_code  mesh.status_reason_code,  -- what status_reason says, for code to branch on
    -- bytes of output the run's commands stored in mesh.exec_output, ever (mesh.output_run_quota)
    output_bytes        bigint NOT NULL DEFAULT 0,
    -- what the run declared (project, from_snapshot) and what its /workspace stands on
    project             text CHECK (mesh.project_name_valid(project)),
    from_snapshot       bigint REFERENCES mesh.snapshots (id),
    snapshot_id         bigint REFERENCES mesh.snapshots (id)
);
-- Not on last_used_at: every exec touches it, and an indexed column would make each of those
-- updates a new index entry in every index (no HOT update); the reaper's idle test reads
-- coalesce(last_used_at, ...), which no index serves anyway.
CREATE INDEX workspaces_live_idx ON mesh.workspaces (status)
    WHERE status NOT IN ('pending', 'released');
CREATE INDEX workspaces_agent_idx ON mesh.workspaces (agent_id, status);
CREATE INDEX workspaces_backend_idx ON mesh.workspaces (backend_kind)
    WHERE status NOT IN ('pending', 'released');
CREATE INDEX workspaces_parent_idx ON mesh.workspaces (parent_run_id)
    WHERE parent_run_id IS NOT NULL;
CREATE INDEX workspaces_snapshot_idx ON mesh.workspaces (snapshot_id)
    WHERE snapshot_id IS NOT NULL AND status <> 'released';

-- Every command.  Env values are not kept (they may be secrets), only names.
CREATE TABLE mesh.execs (
    id             bigserial PRIMARY KEY,
    workspace_id   bigint NOT NULL REFERENCES mesh.workspaces (id),
    run_id         text NOT NULL,
    argv           text[] NOT NULL,
    dir            text,
    env_names      text[],
    stdin_bytes    integer NOT NULL DEFAULT 0,
    timeout_ms     bigint NOT NULL,
    status         mesh.exec_status NOT NULL DEFAULT 'running',
    exit_code      integer,
    stdout         text,
    stderr         text,
    truncated      boolean NOT NULL DEFAULT false,
    -- the whole output lives in mesh.exec_output; offsets count its bytes
    stdout_bytes   bigint NOT NULL DEFAULT 0,   -- stdout's length (dropped bytes included)
    stderr_bytes   bigint NOT NULL DEFAULT 0,
    stdout_dropped bigint NOT NULL DEFAULT 0,   -- leading bytes not kept (ceiling, retention)
    stderr_dropped bigint NOT NULL DEFAULT 0,
    wall_seconds   double precision,
    cpu_seconds    double precision,
    memory_peak_bytes bigint,        -- the workspace's peak memory during the exec, where reported
    charged_seconds double precision,
    charge_basis   text CHECK (charge_basis IN ('cpu', 'wall')),
    error          text,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at    timestamptz,
    -- a background command (mesh_exec_start): it runs on between calls, a
    -- worker follows it, and how far into each stream the worker has read
    -- from the backend and stored (its offsets in the backend's own count,
    -- which redaction makes differ from stdout_bytes)
    background     boolean NOT NULL DEFAULT false,
    stdout_read    bigint NOT NULL DEFAULT 0,
    stderr_read    bigint NOT NULL DEFAULT 0,
    -- why storing the command's output stopped short (the command itself ran on): a
    -- background stream reached mesh.exec_output_limit, or a bound on what all output may
    -- take was reached (src/exec_output.c); output_unstored counts the bytes not stored
    output_stopped text CHECK (output_stopped IN ('command limit', 'run quota', 'install quota',
                                                  'disk reserve')),
    output_unstored bigint NOT NULL DEFAULT 0,
    -- the secret part of its NOTIFY channel (mesh.exec_channel_name): 122 random bits, so
    -- only a role that may read the exec learns the channel (mesh_exec_channel)
    notify_key     text NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', '')
);
CREATE INDEX execs_workspace_idx ON mesh.execs (workspace_id, id);
CREATE INDEX execs_running_idx ON mesh.execs (started_at) WHERE status = 'running';
CREATE INDEX execs_run_idx ON mesh.execs (run_id, id);

-- Acquisitions, releases, file writes and reads, selections, failures.
CREATE TABLE mesh.events (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text NOT NULL,
    run_id       text,
    workspace_id bigint,
    backend      text,
    detail       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_run_idx ON mesh.events (run_id, id);
CREATE INDEX events_kind_idx ON mesh.events (kind, at);

-- What pg_dump keeps (README "Backup and restore"): the configuration whole, credentials
-- included, and the history of finished runs (released, or failed and released); never a
-- live run's rows, which would come back as workspaces no backend holds for the restored
-- install.  The filters run in pg_dump's session (empty search_path: names qualified), in
-- one snapshot, and keep every foreign key whole (an exec of a dumped workspace, ...).
-- The sequences of dumped rows' ids come along, so new rows never reuse a restored id.
SELECT pg_catalog.pg_extension_config_dump('mesh.backends', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.backend_credentials', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.agents', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.agent_roles', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.run_budgets', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.settings', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.workspaces',
    $$WHERE status = 'released' OR (status = 'failed' AND released_at IS NOT NULL)$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.workspaces_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.execs',
    $$WHERE workspace_id IN (SELECT w.id FROM mesh.workspaces w
                              WHERE w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL))$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.execs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.events',
    $$WHERE run_id IS NULL
         OR run_id NOT IN (SELECT w.run_id FROM mesh.workspaces w
                            WHERE NOT (w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL)))$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.events_id_seq', '');
-- a capture in progress is a live run's
SELECT pg_catalog.pg_extension_config_dump('mesh.snapshots', $$WHERE status <> 'capturing'$$);

-- A restore puts the dumped rows into a fresh install, whose CREATE EXTENSION made rows of its
-- own: the policy row, and the embedded "local" backend where the embedded daemon is on.  The
-- dumped row replaces that one, instead of failing on its key (and with it the whole table's
-- data).  The policy has one row, which only this script and a restore insert; a backend row
-- is replaced only by an older one of the same name (a restored row predates the install's
-- own; one mesh.backend_add inserts never does), and only the embedded one CREATE EXTENSION made.
CREATE FUNCTION mesh.settings_restored() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    DELETE FROM mesh.settings;
    RETURN NEW;
END
$$;
CREATE TRIGGER settings_restored BEFORE INSERT ON mesh.settings
    FOR EACH ROW EXECUTE FUNCTION mesh.settings_restored();

CREATE FUNCTION mesh.backends_restored() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    DELETE FROM mesh.backends b
     WHERE b.name = NEW.name AND b.created_at > NEW.created_at AND b.config @> '{"embedded": true}';
    RETURN NEW;
END
$$;
CREATE TRIGGER backends_restored BEFORE INSERT ON mesh.backends
    FOR EACH ROW EXECUTE FUNCTION mesh.backends_restored();
------------------------------------------------------------------------------
-- Internal functions (C)
------------------------------------------------------------------------------
CREATE FUNCTION mesh.validate_backend_config(driver text, config jsonb) RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_validate_backend_config' LANGUAGE C STRICT;
CREATE FUNCTION mesh.drivers() RETURNS text[]
    AS 'MODULE_PATHNAME', 'mesh_drivers' LANGUAGE C STRICT;
-- Run a reaper sweep now; returns what it did.
CREATE FUNCTION mesh.sweep() RETURNS TABLE (action text, run_id text, backend text, detail text)
    AS 'MODULE_PATHNAME', 'mesh_sweep' LANGUAGE C;
-- Once the calling transaction commits, the reaper reclaims the retired snapshots no live
-- workspace stands on (called where a snapshot is retired or a workspace on one released).
CREATE FUNCTION mesh.snapshot_reclaim_soon() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_snapshot_reclaim_soon' LANGUAGE C VOLATILE;

-- Where the time of the calls answered since the server started (or the last reset) went:
-- per operation and stage (handoff, worker_txn, http, reply, total), cumulative; every
-- stage row of an operation carries the operation's call count.
CREATE FUNCTION mesh.call_stages()
RETURNS TABLE (op text, stage text, calls bigint, total_ms double precision)
    AS 'MODULE_PATHNAME', 'mesh_call_stages' LANGUAGE C VOLATILE;
CREATE FUNCTION mesh.call_stages_reset() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_call_stages_reset' LANGUAGE C VOLATILE;
------------------------------------------------------------------------------
-- Backend selection, used by the workers at materialization.
------------------------------------------------------------------------------
-- Which enabled backend a new workspace of this agent uses: the agent's pin,
-- else the first enabled backend in catalog order.  Never falls through from
-- a pin to another backend.
CREATE FUNCTION mesh.select_backend(p_agent_id text,
                                    OUT backend text, OUT implicit boolean, OUT size mesh.size_tier)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    pin text;
    pin_enabled boolean;
    wanted mesh.size_tier;
    climbed mesh.size_tier;
    ceiling mesh.size_tier;
    enabled_count integer;
BEGIN
    SELECT a.backend, a.default_size, a.climbed_size INTO pin, wanted, climbed
      FROM mesh.agents a WHERE a.agent_id = p_agent_id;
    SELECT count(*) INTO enabled_count FROM mesh.backends b WHERE b.enabled;
    IF pin IS NOT NULL THEN
        SELECT b.enabled INTO pin_enabled FROM mesh.backends b WHERE b.name = pin;
        IF NOT coalesce(pin_enabled, false) THEN
            RAISE EXCEPTION 'agent "%" is pinned to backend "%", which is not enabled', p_agent_id, pin
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Enable the backend with mesh.backend_enable(), or clear the pin with mesh.agent_set(agent_id, backend => NULL).';
        END IF;
        backend := pin;
        implicit := false;
    ELSE
        SELECT b.name INTO backend FROM mesh.backends b WHERE b.enabled
            ORDER BY b.catalog_order, b.name LIMIT 1;
        IF backend IS NULL THEN
            RAISE EXCEPTION 'no backend is enabled'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Add one with mesh.backend_add(), or enable one with mesh.backend_enable().';
        END IF;
        implicit := enabled_count > 1;
    END IF;
    SELECT b.max_size INTO ceiling FROM mesh.backends b WHERE b.name = backend;
    -- an OOM climb raises the tier, never above the backend's ceiling
    size := least(greatest(coalesce(wanted, 'standard'), climbed), ceiling);
END
$$;
------------------------------------------------------------------------------
-- Admin functions: the only way to configure backends and agents.
------------------------------------------------------------------------------
-- The one error for a required argument given as NULL: names[i] is missing
-- when missing[i] is true.
CREATE FUNCTION mesh.require_args(fn text, names text[], missing boolean[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    FOR i IN 1 .. cardinality(names) LOOP
        IF missing[i] THEN
            RAISE EXCEPTION '%: % must not be NULL', CASE WHEN fn LIKE 'mesh\_%' THEN fn ELSE 'mesh.' || fn END, names[i]
                USING ERRCODE = 'null_value_not_allowed', HINT = format('Pass a value for %s.', names[i]);
        END IF;
    END LOOP;
END
$$;

-- The one error for a backend name that is not in the catalog.
CREATE FUNCTION mesh.raise_unknown_backend(name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'backend "%" does not exist', name
        USING ERRCODE = 'undefined_object', HINT = 'See mesh.backend_catalog for configured backends.';
END
$$;

CREATE FUNCTION mesh.backend_add(name text, driver text, config jsonb DEFAULT '{}',
                                 enabled boolean DEFAULT true, catalog_order integer DEFAULT 100,
                                 max_size mesh.size_tier DEFAULT 'xlarge')
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_add', ARRAY['name', 'driver', 'config', 'enabled', 'catalog_order', 'max_size'],
        ARRAY[backend_add.name IS NULL, backend_add.driver IS NULL, backend_add.config IS NULL,
              backend_add.enabled IS NULL, backend_add.catalog_order IS NULL,
              backend_add.max_size IS NULL]);
    PERFORM mesh.validate_backend_config(driver, config);
    INSERT INTO mesh.backends AS b (name, driver, enabled, catalog_order, config, max_size)
    VALUES (backend_add.name, backend_add.driver, backend_add.enabled,
            backend_add.catalog_order, backend_add.config, backend_add.max_size);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'backend "%" already exists', backend_add.name
        USING ERRCODE = 'duplicate_object', HINT = 'Use mesh.backend_configure() to change it.';
END
$$;

CREATE FUNCTION mesh.backend_configure(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    drv text;
BEGIN
    PERFORM mesh.require_args('backend_configure', ARRAY['name', 'config'],
        ARRAY[backend_configure.name IS NULL, backend_configure.config IS NULL]);
    SELECT b.driver INTO drv FROM mesh.backends b WHERE b.name = backend_configure.name FOR UPDATE;
    IF drv IS NULL THEN
        PERFORM mesh.raise_unknown_backend(backend_configure.name);
    END IF;
    PERFORM mesh.validate_backend_config(drv, config);
    UPDATE mesh.backends b SET config = backend_configure.config, updated_at = now()
     WHERE b.name = backend_configure.name;
END
$$;

CREATE FUNCTION mesh.backend_enable(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_enable', ARRAY['name'], ARRAY[backend_enable.name IS NULL]);
    UPDATE mesh.backends b SET enabled = true, updated_at = now() WHERE b.name = backend_enable.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_enable.name);
    END IF;
END
$$;

-- Disabling un-pins the backend's agents in the same transaction and
-- reports which were reset.  What the backend minted is still released.
CREATE FUNCTION mesh.backend_disable(name text, OUT reset_agents text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_disable', ARRAY['name'],
        ARRAY[backend_disable.name IS NULL]);
    UPDATE mesh.backends b SET enabled = false, updated_at = now() WHERE b.name = backend_disable.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_disable.name);
    END IF;
    WITH reset AS (
        UPDATE mesh.agents a SET backend = NULL WHERE a.backend = backend_disable.name
        RETURNING a.agent_id)
    SELECT coalesce(array_agg(agent_id ORDER BY agent_id), '{}') INTO reset_agents FROM reset;
    INSERT INTO mesh.events (kind, backend, detail)
    VALUES ('backend_disabled', backend_disable.name, jsonb_build_object('reset_agents', reset_agents));
END
$$;

-- Write-only: nothing reads a credential back through SQL.
CREATE FUNCTION mesh.backend_set_credential(name text, credential text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_credential', ARRAY['name', 'credential'],
        ARRAY[backend_set_credential.name IS NULL, backend_set_credential.credential IS NULL]);
    IF credential = '' THEN
        RAISE EXCEPTION 'credential must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM mesh.backends b WHERE b.name = backend_set_credential.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_credential.name);
    END IF;
    INSERT INTO mesh.backend_credentials AS c (backend, credential)
    VALUES (backend_set_credential.name, backend_set_credential.credential)
    ON CONFLICT (backend) DO UPDATE SET credential = excluded.credential, set_at = now();
    INSERT INTO mesh.events (kind, backend) VALUES ('credential_set', backend_set_credential.name);
END
$$;

CREATE FUNCTION mesh.backend_set_order(name text, catalog_order integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_order', ARRAY['name', 'catalog_order'],
        ARRAY[backend_set_order.name IS NULL, backend_set_order.catalog_order IS NULL]);
    UPDATE mesh.backends b SET catalog_order = backend_set_order.catalog_order, updated_at = now()
     WHERE b.name = backend_set_order.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_order.name);
    END IF;
END
$$;

CREATE FUNCTION mesh.backend_set_max_size(name text, max_size mesh.size_tier)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_max_size', ARRAY['name', 'max_size'],
        ARRAY[backend_set_max_size.name IS NULL, backend_set_max_size.max_size IS NULL]);
    UPDATE mesh.backends b SET max_size = backend_set_max_size.max_size, updated_at = now()
     WHERE b.name = backend_set_max_size.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_max_size.name);
    END IF;
END
$$;

-- Per-agent settings.  A pin can only name a backend that is enabled now.
CREATE FUNCTION mesh.agent_set(agent_id text, backend text DEFAULT NULL,
                               default_size mesh.size_tier DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_set', ARRAY['agent_id'], ARRAY[agent_set.agent_id IS NULL]);
    IF backend IS NOT NULL AND NOT EXISTS
        (SELECT 1 FROM mesh.backends b WHERE b.name = agent_set.backend AND b.enabled) THEN
        RAISE EXCEPTION 'cannot pin agent "%" to backend "%": it is not an enabled backend',
                        agent_set.agent_id, agent_set.backend
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'See mesh.backend_catalog for the enabled backends.';
    END IF;
    INSERT INTO mesh.agents AS a (agent_id, backend, default_size)
    VALUES (agent_set.agent_id, agent_set.backend, agent_set.default_size)
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE SET backend = excluded.backend,
                                         default_size = excluded.default_size;
END
$$;

-- Budgets: per agent, per run override, instance default.  NULL clears a limit.
CREATE FUNCTION mesh.agent_set_budget(agent_id text, max_compute_seconds double precision DEFAULT NULL,
                                      max_concurrent_workspaces integer DEFAULT NULL,
                                      idle_timeout interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_set_budget', ARRAY['agent_id'],
        ARRAY[agent_set_budget.agent_id IS NULL]);
    INSERT INTO mesh.agents AS a (agent_id, max_compute_seconds, max_concurrent_workspaces, idle_timeout)
    VALUES (agent_set_budget.agent_id, agent_set_budget.max_compute_seconds,
            agent_set_budget.max_concurrent_workspaces, agent_set_budget.idle_timeout)
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE
       SET max_compute_seconds = excluded.max_compute_seconds,
           max_concurrent_workspaces = excluded.max_concurrent_workspaces,
           idle_timeout = excluded.idle_timeout;
END
$$;

CREATE FUNCTION mesh.run_set_budget(run_id text, max_compute_seconds double precision DEFAULT NULL,
                                    idle_timeout interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('run_set_budget', ARRAY['run_id'],
        ARRAY[run_set_budget.run_id IS NULL]);
    INSERT INTO mesh.run_budgets AS b (run_id, max_compute_seconds, idle_timeout)
    VALUES (run_set_budget.run_id, run_set_budget.max_compute_seconds, run_set_budget.idle_timeout)
    ON CONFLICT ON CONSTRAINT run_budgets_pkey DO UPDATE
       SET max_compute_seconds = excluded.max_compute_seconds,
           idle_timeout = excluded.idle_timeout, set_at = now();
END
$$;

CREATE FUNCTION mesh.set_policy(max_run_lifetime interval DEFAULT NULL, idle_timeout interval DEFAULT NULL,
                                max_compute_seconds double precision DEFAULT NULL,
                                run_ownership boolean DEFAULT NULL,
                                tier_climb_reset_runs integer DEFAULT NULL,
                                max_background_per_run integer DEFAULT NULL)
RETURNS mesh.settings LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    result mesh.settings;
BEGIN
    IF set_policy.tier_climb_reset_runs < 1 THEN
        RAISE EXCEPTION 'tier_climb_reset_runs must be at least 1, not %', set_policy.tier_climb_reset_runs
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the number of clean runs at a climbed tier after which an agent returns to its own tier.';
    END IF;
    IF set_policy.max_background_per_run < 1 THEN
        RAISE EXCEPTION 'max_background_per_run must be at least 1, not %', set_policy.max_background_per_run
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the number of background commands one run may have running at once.';
    END IF;
    UPDATE mesh.settings s
       SET max_run_lifetime = coalesce(set_policy.max_run_lifetime, s.max_run_lifetime),
           idle_timeout = coalesce(set_policy.idle_timeout, s.idle_timeout),
           max_compute_seconds = set_policy.max_compute_seconds,
           run_ownership = coalesce(set_policy.run_ownership, s.run_ownership),
           tier_climb_reset_runs = coalesce(set_policy.tier_climb_reset_runs, s.tier_climb_reset_runs),
           max_background_per_run = coalesce(set_policy.max_background_per_run, s.max_background_per_run)
    RETURNING * INTO result;
    RETURN result;
END
$$;

-- The budget in force for a run: its override, else its agent's, else the instance's.
CREATE VIEW mesh.run_limits AS
SELECT w.id AS workspace_id, w.run_id, w.agent_id,
       coalesce(rb.max_compute_seconds, a.max_compute_seconds, s.max_compute_seconds) AS max_compute_seconds,
       coalesce(rb.idle_timeout, a.idle_timeout, s.idle_timeout) AS idle_timeout,
       a.max_concurrent_workspaces,
       s.max_run_lifetime
  FROM mesh.workspaces w
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = w.agent_id
  LEFT JOIN mesh.run_budgets rb ON rb.run_id = w.run_id;
------------------------------------------------------------------------------
-- OOM-aware tier climb: a run whose command ran out of memory at tier T gives
-- its agent T+1 for the next runs (never above the backend's max_size); after
-- settings.tier_climb_reset_runs clean runs at that tier the agent is back to
-- its own.  Called by the workers in the transactions that record an exec's
-- end and a run's release; every climb, cap and reset is an event.  The oom
-- hook returns what it did, for the caller's NOTICE.
------------------------------------------------------------------------------
CREATE FUNCTION mesh.tier_climb_on_oom(p_exec_id bigint) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    ceiling mesh.size_tier;
    target mesh.size_tier;
    reached mesh.size_tier;
BEGIN
    SELECT w.* INTO ws FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
     WHERE e.id = p_exec_id AND e.status = 'oom';
    IF ws.id IS NULL OR ws.size IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM mesh.agent_lock(ws.agent_id);
    -- once per run, however many of its commands run out of memory
    PERFORM 1 FROM mesh.events ev WHERE ev.run_id = ws.run_id AND ev.kind IN ('tier_climb', 'tier_climb_capped');
    IF FOUND THEN
        RETURN format('agent "%s" already climbed for this run', ws.agent_id);
    END IF;
    SELECT b.max_size INTO ceiling FROM mesh.backends b WHERE b.name = ws.backend_kind;
    target := least((enum_range(ws.size, NULL))[2], coalesce(ceiling, ws.size));
    IF target IS NULL OR target <= ws.size THEN
        UPDATE mesh.agents a SET clean_runs_since_climb = 0 WHERE a.agent_id = ws.agent_id;
        INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
        VALUES ('tier_climb_capped', ws.run_id, ws.id, ws.backend_kind,
                jsonb_build_object('agent_id', ws.agent_id, 'exec_id', p_exec_id, 'from', ws.size,
                                   'max_size', coalesce(ceiling, ws.size)));
        RETURN format('tier "%s" is the largest backend "%s" allows, so agent "%s" cannot climb (mesh.tier_climbs)',
                      ws.size, ws.backend_kind, ws.agent_id);
    END IF;
    UPDATE mesh.agents a SET climbed_size = greatest(a.climbed_size, target), climbed_at = now(),
           clean_runs_since_climb = 0
     WHERE a.agent_id = ws.agent_id RETURNING a.climbed_size INTO reached;
    INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
    VALUES ('tier_climb', ws.run_id, ws.id, ws.backend_kind,
            jsonb_build_object('agent_id', ws.agent_id, 'exec_id', p_exec_id, 'from', ws.size, 'to', reached));
    RETURN format('agent "%s" climbs from tier "%s" to "%s" for its next runs (mesh.tier_climbs)',
                  ws.agent_id, ws.size, reached);
END
$$;

-- A run was released.  If it ran at its agent's climbed tier (or above), ran
-- commands and none ran out of memory, it counts as clean; enough clean runs
-- reset the climb.
CREATE FUNCTION mesh.tier_climb_on_release(p_workspace_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    ag mesh.agents;
    needed integer;
BEGIN
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.id = p_workspace_id;
    SELECT * INTO ag FROM mesh.agents a WHERE a.agent_id = ws.agent_id AND a.climbed_size IS NOT NULL FOR UPDATE;
    IF ag.agent_id IS NULL OR ws.size IS NULL OR ws.size < ag.climbed_size
       OR NOT EXISTS (SELECT 1 FROM mesh.execs e WHERE e.workspace_id = ws.id AND e.status <> 'running')
       OR EXISTS (SELECT 1 FROM mesh.execs e WHERE e.workspace_id = ws.id AND e.status = 'oom') THEN
        RETURN;
    END IF;
    SELECT s.tier_climb_reset_runs INTO needed FROM mesh.settings s;
    IF ag.clean_runs_since_climb + 1 < needed THEN
        UPDATE mesh.agents a SET clean_runs_since_climb = a.clean_runs_since_climb + 1
         WHERE a.agent_id = ag.agent_id;
        RETURN;
    END IF;
    UPDATE mesh.agents a SET climbed_size = NULL, climbed_at = NULL, clean_runs_since_climb = 0
     WHERE a.agent_id = ag.agent_id;
    INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
    VALUES ('tier_reset', ws.run_id, ws.id, ws.backend_kind,
            jsonb_build_object('agent_id', ag.agent_id, 'from', ag.climbed_size, 'clean_runs', needed));
END
$$;

-- Every climb, cap and reset, with the agent's climb in force now.
CREATE VIEW mesh.tier_climbs AS
SELECT e.at, CASE e.kind WHEN 'tier_climb' THEN 'climb' WHEN 'tier_climb_capped' THEN 'capped'
                         ELSE 'reset' END AS change,
       e.detail->>'agent_id' AS agent_id, e.run_id, (e.detail->>'exec_id')::bigint AS exec_id, e.backend,
       (e.detail->>'from')::mesh.size_tier AS from_size, (e.detail->>'to')::mesh.size_tier AS to_size,
       a.climbed_size AS climbed_size_now, a.clean_runs_since_climb, s.tier_climb_reset_runs
  FROM mesh.events e
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = e.detail->>'agent_id'
 WHERE e.kind IN ('tier_climb', 'tier_climb_capped', 'tier_reset');
------------------------------------------------------------------------------
-- Worker state changes.  Every move of a workspace or an exec that a mesh
-- worker (the pool, the reaper, recovery) makes is one of these functions,
-- called as mesh_worker in a transaction of the worker's own; nobody else
-- may call them.  Each checks the state it moves from: a move that does not
-- apply raises object_not_in_prerequisite_state, or, where a race with the
-- reaper or another exec makes it legitimate, changes nothing and says so.
-- Reasons are stored as codes (status_reason_code) and rendered into the
-- sentence people read (status_reason) here, by mesh.status_reason_text.
------------------------------------------------------------------------------

-- The sentence a person reads for a reason code and its particulars.
CREATE FUNCTION mesh.status_reason_text(code mesh.status_reason_code, detail jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RETURN CASE code
        WHEN 'acquire_interrupted' THEN
            'acquire interrupted: ' || (detail->>'cause') || '; the run''s next call tries again'
        WHEN 'acquire_failed' THEN detail->>'cause'
        WHEN 'hibernated_idle' THEN 'hibernated after sitting idle'
        WHEN 'hibernated_by_backend' THEN
            'hibernated by the backend (its sandbox was stopped); the run''s next call wakes it'
        WHEN 'found_running' THEN
            'the backend runs its sandbox (an acquire whose answer was lost; found by the reaper)'
        WHEN 'lost' THEN 'the backend no longer has this workspace (found by the reaper)'
        WHEN 'budget_exhausted' THEN
            format('budget exhausted: stopped after %s compute-seconds (the run''s budget is %s)',
                   round((detail->>'used_seconds')::numeric, 1),
                   round((detail->>'max_compute_seconds')::numeric, 1))
        WHEN 'release_stuck' THEN
            (detail->>'cause') || CASE WHEN (detail->>'answered')::boolean
                                       THEN '; the reaper retries at its next sweep'
                                       ELSE '; must be released by hand unless the backend comes back' END
    END;
END
$$;

-- The error for a move a workspace's status does not allow.
CREATE FUNCTION mesh.raise_bad_move(ws mesh.workspaces, move text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF ws.id IS NULL THEN
        RAISE EXCEPTION 'mesh: no workspace to %', move USING ERRCODE = 'undefined_object';
    END IF;
    RAISE EXCEPTION 'mesh: the workspace of run "%" is %, it cannot %', ws.run_id, ws.status, move
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

-- The workspace row, locked for the move that follows, which its status
-- must allow (allowed NULL: any status).  plpgsql: its plan is kept for the
-- session, where a SQL function's is made again at every call.
CREATE FUNCTION mesh.workspace_lock(p_id bigint, allowed mesh.workspace_status[], move text)
RETURNS mesh.workspaces
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
BEGIN
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.id = p_id FOR UPDATE;
    IF ws.id IS NULL OR ws.status <> ALL (coalesce(allowed, ARRAY[ws.status])) THEN
        PERFORM mesh.raise_bad_move(ws, move);
    END IF;
    RETURN ws;
END
$$;

-- A move of the workspace, as an event.
CREATE FUNCTION mesh.workspace_event(ws mesh.workspaces, kind text, detail jsonb DEFAULT '{}') RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
    VALUES (kind, ws.run_id, ws.id, ws.backend_kind, detail);
END
$$;

-- Declare a run (mesh_acquire): intent only.  Declaring it again with the
-- same particulars returns the row; anything else is refused.
CREATE FUNCTION mesh.workspace_declare(p_run_id text, p_agent_id text, p_actor_id text,
                                       p_parent_run_id text, p_environment text, p_owner oid,
                                       p_project text DEFAULT NULL, p_from_snapshot bigint DEFAULT NULL)
RETURNS mesh.workspaces
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    env mesh.environments;
    missing text;
    -- project and from_snapshot are checked by mesh.snapshot_declare (it raises)
    v_project text := mesh.snapshot_declare(p_project, p_from_snapshot, p_owner);
BEGIN
    IF NOT mesh.agent_usable(p_agent_id, p_owner) THEN
        PERFORM mesh.agent_claim(p_agent_id, p_owner);   -- or raises
    END IF;
    INSERT INTO mesh.workspaces AS w (run_id, agent_id, created_by_actor_id, parent_run_id, environment, owner_role,
                                      project, from_snapshot)
    VALUES (p_run_id, p_agent_id, p_actor_id, p_parent_run_id, p_environment, p_owner::regrole,
            v_project, p_from_snapshot)
    ON CONFLICT (run_id) DO NOTHING RETURNING w.* INTO ws;
    IF ws.id IS NOT NULL THEN
        IF p_environment IS NOT NULL THEN
            SELECT * INTO env FROM mesh.environments e WHERE e.name = p_environment;
            IF env.name IS NULL THEN
                RAISE EXCEPTION 'environment "%" is not declared', p_environment
                    USING ERRCODE = 'undefined_object',
                          HINT = 'An admin declares it with mesh.environment_set(name, needs).';
            END IF;
            SELECT string_agg(n->>'name', ', ') INTO missing FROM jsonb_array_elements(env.needs) n
             WHERE n->>'kind' = 'secret'
               AND NOT EXISTS (SELECT 1 FROM mesh.secrets s WHERE s.agent_id = p_agent_id AND s.name = n->>'name');
            IF missing IS NOT NULL THEN
                RAISE EXCEPTION 'environment "%" needs secret(s) %, which agent "%" does not have',
                                p_environment, missing, p_agent_id
                    USING ERRCODE = 'undefined_object',
                          HINT = 'An admin sets them with mesh.secret_set(agent_id, name, value).';
            END IF;
            INSERT INTO mesh.grants (run_id, kind, name, scope, deliver_as, expires_at)
            SELECT p_run_id, n->>'kind', n->>'name', n->>'scope', n->>'as',
                   CASE WHEN n ? 'ttl' THEN now() + (n->>'ttl')::interval END
              FROM jsonb_array_elements(env.needs) n
            ON CONFLICT (run_id, kind, name) DO NOTHING;
        END IF;
        RETURN ws;
    END IF;
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = p_run_id;
    IF NOT mesh.may_drive(ws.owner_role, p_owner) THEN
        RAISE EXCEPTION 'run "%" is already declared by another role', p_run_id
            USING ERRCODE = 'unique_violation', HINT = 'Run ownership is on: use a new run_id.';
    END IF;
    IF ws.agent_id <> p_agent_id OR ws.created_by_actor_id <> p_actor_id
       OR ws.parent_run_id IS DISTINCT FROM p_parent_run_id OR ws.environment IS DISTINCT FROM p_environment
       OR ws.from_snapshot IS DISTINCT FROM p_from_snapshot OR (p_project IS NOT NULL AND ws.project IS DISTINCT FROM p_project) THEN
        RAISE EXCEPTION 'run "%" is already declared with a different agent, actor, parent, environment, project or snapshot', p_run_id
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('It was declared by agent "%s" for actor "%s" with parent run %s and environment %s.',
                                  ws.agent_id, ws.created_by_actor_id, coalesce(ws.parent_run_id, '(none)'),
                                  coalesce(ws.environment, '(none)')),
                  HINT = 'A run has one workspace; use a new run_id for different work.';
    END IF;
    RETURN ws;
END
$$;

-- The agent's row, made if it has none yet, locked until the transaction
-- ends: what serialises the checks, claims and climbs of one agent.
CREATE FUNCTION mesh.agent_lock(p_agent_id text) RETURNS mesh.agents
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ag mesh.agents;
BEGIN
    INSERT INTO mesh.agents (agent_id) VALUES (p_agent_id) ON CONFLICT DO NOTHING;
    SELECT * INTO ag FROM mesh.agents a WHERE a.agent_id = p_agent_id FOR UPDATE;
    RETURN ag;
END
$$;

-- The agent's concurrency limit, checked under a lock on the agent's row so
-- two runs of one agent going live at once on different workers cannot both
-- pass: the second counts after the first committed.
CREATE FUNCTION mesh.agent_check_concurrency(p_agent_id text, p_workspace_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    lim integer := (mesh.agent_lock(p_agent_id)).max_concurrent_workspaces;
    live bigint;
BEGIN
    IF lim IS NULL THEN
        RETURN;
    END IF;
    -- a fresh statement, so a snapshot taken after the lock was granted
    SELECT count(*) INTO live FROM mesh.workspaces w
     WHERE w.agent_id = p_agent_id AND w.status IN ('acquiring', 'ready', 'releasing') AND w.id <> p_workspace_id;
    IF live >= lim THEN
        RAISE EXCEPTION 'agent "%" already has % live workspace(s), its limit is %', p_agent_id, live, lim
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = 'Release one of the agent''s runs, or raise the limit with mesh.agent_set_budget().';
    END IF;
END
$$;

-- First half of materializing a pending workspace: within the agent's
-- limit, which backend it gets, with that backend's catalog entry (the
-- worker asks the driver for capabilities and a reference, then calls
-- mesh.workspace_begin_acquire in the same transaction).
CREATE FUNCTION mesh.workspace_choose_backend(p_id bigint,
    OUT backend text, OUT implicit boolean, OUT size mesh.size_tier,
    OUT driver text, OUT config text, OUT credential text)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending}', 'choose a backend');
BEGIN
    IF ws.external_ref IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'choose a backend');
    END IF;
    PERFORM mesh.agent_check_concurrency(ws.agent_id, ws.id);
    SELECT s.backend, s.implicit, s.size INTO backend, implicit, size FROM mesh.select_backend(ws.agent_id) s;
    SELECT b.driver, b.config::text, c.credential INTO driver, config, credential
      FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name
     WHERE b.name = workspace_choose_backend.backend;
END
$$;

-- pending -> acquiring: the backend, reference, tier, capabilities and
-- network policy recorded before anything exists on the backend.  Returns
-- the policy; a policy that refuses this backend raises and the row stays
-- pending.
CREATE FUNCTION mesh.workspace_begin_acquire(p_id bigint, p_backend text, p_ref text, p_size mesh.size_tier,
                                             p_caps jsonb, p_implicit boolean)
RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending}', 'begin an acquisition');
    policy jsonb;
BEGIN
    IF ws.external_ref IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'begin an acquisition');
    END IF;
    policy := mesh.workspace_egress(p_backend, p_caps);
    UPDATE mesh.workspaces w SET status = 'acquiring', backend_kind = p_backend, external_ref = p_ref,
           size = p_size, capabilities = p_caps, egress = policy,
           status_reason = NULL, status_reason_code = NULL
     WHERE w.id = p_id;
    ws.backend_kind := p_backend;
    PERFORM mesh.workspace_event(ws, 'acquiring',
        jsonb_build_object('size', p_size, 'implicit_selection', p_implicit, 'egress', policy));
    RETURN policy;
END
$$;

-- pending -> acquiring again, on the backend and under the reference it
-- has: a hibernated workspace woken, or an interrupted acquire retried.
-- Going live again must fit the agent's limit.
CREATE FUNCTION mesh.workspace_begin_wake(p_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending}', 'be woken');
BEGIN
    IF ws.external_ref IS NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'be woken');
    END IF;
    PERFORM mesh.agent_check_concurrency(ws.agent_id, ws.id);
    UPDATE mesh.workspaces w SET status = 'acquiring', status_reason = NULL, status_reason_code = NULL
     WHERE w.id = p_id;
    PERFORM mesh.workspace_event(ws, 'waking');
END
$$;

-- The backend made (or woke) the sandbox: ready.  From acquiring; from
-- ready when a call woke a stopped sandbox; from pending when the reaper
-- settled the row while the answer was on its way.
CREATE FUNCTION mesh.workspace_acquired(p_id bigint, p_caps jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{acquiring,ready,pending}', 'become ready');
BEGIN
    IF ws.external_ref IS NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'become ready');
    END IF;
    UPDATE mesh.workspaces w SET status = 'ready', capabilities = p_caps, status_reason = NULL,
           status_reason_code = NULL, materialized_at = now(), last_used_at = now()
     WHERE w.id = p_id;
    PERFORM mesh.workspace_event(ws, 'acquired');
END
$$;

-- An acquisition failed.  Retryable failures (backend unreachable, a
-- garbled answer) put the row back to pending with its recorded backend
-- and reference: it no longer counts against the agent's limit, the run's
-- next call retries the same idempotent acquire, and nothing the backend
-- may have made is forgotten (the reaper reconciles it).  Others fail the
-- workspace.  A row the reaper moved meanwhile is left as it is (false).
CREATE FUNCTION mesh.workspace_acquire_failed(p_id bigint, p_retryable boolean, p_cause text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, NULL, 'fail an acquisition');
    code mesh.status_reason_code := CASE WHEN p_retryable THEN 'acquire_interrupted' ELSE 'acquire_failed' END;
    moved boolean := ws.status IN ('acquiring', 'ready');
BEGIN
    IF moved THEN
        UPDATE mesh.workspaces w
           SET status = CASE WHEN p_retryable THEN 'pending' ELSE 'failed' END::mesh.workspace_status,
               status_reason_code = code,
               status_reason = mesh.status_reason_text(code, jsonb_build_object('cause', p_cause))
         WHERE w.id = p_id;
    END IF;
    PERFORM mesh.workspace_event(ws, 'acquire_failed', jsonb_build_object('retryable', p_retryable));
    RETURN moved;
END
$$;

-- The run spent its compute budget: failed, a terminal status whose reason
-- says what was allowed and what was used.  Returns that reason.  A
-- workspace already released stays released.
CREATE FUNCTION mesh.workspace_budget_exhausted(p_id bigint, p_used double precision, p_budget double precision)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, NULL, 'stop for its budget');
    detail jsonb := jsonb_build_object('used_seconds', round(p_used::numeric, 3),
                                       'max_compute_seconds', round(p_budget::numeric, 3));
    reason text := mesh.status_reason_text('budget_exhausted',
                       jsonb_build_object('used_seconds', p_used, 'max_compute_seconds', p_budget));
BEGIN
    IF ws.status IS DISTINCT FROM 'released' THEN
        UPDATE mesh.workspaces w SET status = 'failed', status_reason_code = 'budget_exhausted', status_reason = reason
         WHERE w.id = p_id;
    END IF;
    PERFORM mesh.workspace_event(ws, 'budget_exhausted', detail);
    RETURN reason;
END
$$;

-- The move to releasing, committed before the backend is asked.  A failed
-- workspace stays failed (terminal, with its reason) while released.
CREATE FUNCTION mesh.workspace_begin_release(p_id bigint, p_reason text) RETURNS mesh.workspace_status
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending,acquiring,ready,releasing,failed}', 'begin a release');
BEGIN
    IF ws.release_outcome IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'begin a release');
    END IF;
    UPDATE mesh.workspaces w SET status = CASE WHEN w.status = 'failed' THEN w.status ELSE 'releasing' END,
           release_reason = coalesce(p_reason, w.release_reason)
     WHERE w.id = p_id RETURNING w.status INTO ws.status;
    RETURN ws.status;
END
$$;

-- Released: the outcome recorded, the run's tokens revoked, an event.
CREATE FUNCTION mesh.workspace_released(p_id bigint, p_outcome text, p_reason text) RETURNS mesh.workspace_status
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending,acquiring,ready,releasing,failed}', 'be released');
BEGIN
    IF ws.release_outcome IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'be released');
    END IF;
    UPDATE mesh.workspaces w SET status = CASE WHEN w.status = 'failed' THEN w.status ELSE 'released' END,
           release_outcome = p_outcome, release_reason = coalesce(p_reason, w.release_reason), released_at = now()
     WHERE w.id = p_id RETURNING w.status INTO ws.status;
    UPDATE mesh.run_tokens t SET revoked_at = now(), revoked_reason = 'the run released its workspace'
     WHERE t.run_id = ws.run_id AND t.revoked_at IS NULL;
    PERFORM mesh.background_execs_end(p_id, 'killed', 'killed: the run released its workspace');
    PERFORM mesh.workspace_event(ws, 'released', jsonb_build_object('outcome', p_outcome));
    -- the last workspace on a retired snapshot gives its disk back now, not at the next sweep
    IF ws.snapshot_id IS NOT NULL AND EXISTS (SELECT 1 FROM mesh.snapshots s
                                               WHERE s.id = ws.snapshot_id AND s.status = 'retired') THEN
        PERFORM mesh.snapshot_reclaim_soon();
    END IF;
    RETURN ws.status;
END
$$;

-- A release could not reach the backend, or reached it and could not
-- finish (answered).  The row stays live, as evidence, with the reason;
-- "must be released by hand" when no catalog entry or credential is left.
CREATE FUNCTION mesh.workspace_release_stuck(p_id bigint, p_cause text, p_answered boolean, p_by_hand boolean)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{pending,acquiring,ready,releasing,failed}', 'be recorded as stuck in its release');
BEGIN
    IF ws.release_outcome IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'be recorded as stuck in its release');
    END IF;
    UPDATE mesh.workspaces w
       SET status_reason_code = CASE WHEN p_by_hand THEN NULL ELSE 'release_stuck'::mesh.status_reason_code END,
           status_reason = CASE WHEN p_by_hand THEN p_cause
                                ELSE mesh.status_reason_text('release_stuck',
                                         jsonb_build_object('cause', p_cause, 'answered', p_answered)) END,
           release_outcome = CASE WHEN p_by_hand THEN 'must be released by hand' END
     WHERE w.id = p_id;
    PERFORM mesh.workspace_event(ws, 'release_failed',
        jsonb_build_object('reason', (SELECT w.status_reason FROM mesh.workspaces w WHERE w.id = p_id)));
END
$$;

-- An idle workspace was hibernated: the run keeps it (backend and reference
-- stay recorded) and goes back to pending, so its next call wakes it.
CREATE FUNCTION mesh.workspace_idle_hibernated(p_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces := mesh.workspace_lock(p_id, '{ready,releasing}', 'be hibernated');
BEGIN
    IF ws.release_outcome IS NOT NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'be hibernated');
    END IF;
    UPDATE mesh.workspaces w SET status = 'pending', status_reason_code = 'hibernated_idle',
           status_reason = mesh.status_reason_text('hibernated_idle', NULL)
     WHERE w.id = p_id;
    PERFORM mesh.workspace_event(ws, 'hibernated', '{"idle": true}');
END
$$;

-- The reaper settles a live row to what its backend shows, if the row is
-- still in the status the reaper saw (from); the code says what it found:
--   lost: ready, nothing there -> failed;
--   acquire_interrupted: acquiring, nothing there -> pending;
--   hibernated_by_backend: there but stopped -> pending;
--   found_running: pending, there and running -> ready.
-- Returns the run and the reason, or nothing when the row had moved on.
CREATE FUNCTION mesh.workspace_settle(p_backend text, p_ref text, p_from mesh.workspace_status,
                                      p_code mesh.status_reason_code,
                                      OUT run_id text, OUT reason text)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    target mesh.workspace_status := CASE p_code WHEN 'lost' THEN 'failed'
                                                WHEN 'found_running' THEN 'ready'
                                                WHEN 'acquire_interrupted' THEN 'pending'
                                                WHEN 'hibernated_by_backend' THEN 'pending' END;
    id bigint;
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'mesh: "%" is not something the reaper settles a workspace for', p_code
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    reason := mesh.status_reason_text(p_code, jsonb_build_object('cause',
                  'the backend has no sandbox for it (found by the reaper)'));
    UPDATE mesh.workspaces w SET status = target, status_reason_code = p_code, status_reason = reason,
           materialized_at = CASE WHEN target = 'ready' THEN coalesce(w.materialized_at, now())
                                  ELSE w.materialized_at END
     WHERE w.backend_kind = p_backend AND w.external_ref = p_ref AND w.status = p_from
       AND w.release_outcome IS NULL
    RETURNING w.run_id, w.id INTO run_id, id;
    IF id IS NULL THEN
        reason := NULL;
        RETURN;
    END IF;
    INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
    VALUES (CASE WHEN p_code = 'lost' THEN 'workspace_lost' ELSE 'workspace_settled' END,
            workspace_settle.run_id, id, p_backend,
            CASE WHEN p_code = 'lost' THEN '{}'::jsonb
                 ELSE jsonb_build_object('from', p_from, 'to', target, 'reason', reason) END);
END
$$;

-- A file read or write on the workspace, as an event; the workspace was used.
CREATE FUNCTION mesh.workspace_file_event(p_id bigint, p_kind text, p_path text, p_bytes bigint, p_failure text)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('file_read', 'file_write') THEN
        RAISE EXCEPTION 'mesh: "%" is not a file event', p_kind USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE mesh.workspaces w SET last_used_at = now() WHERE w.id = p_id RETURNING w.* INTO ws;
    IF ws.id IS NULL THEN
        PERFORM mesh.raise_bad_move(ws, 'record a file event');
    END IF;
    PERFORM mesh.workspace_event(ws, p_kind,
        jsonb_strip_nulls(jsonb_build_object('path', p_path, 'bytes', p_bytes, 'failure', p_failure)));
END
$$;

-- A new run token (its hash), recorded before it is handed to the
-- workspace; the run's older tokens are revoked.
CREATE FUNCTION mesh.run_token_mint(p_id bigint, p_sha256 bytea) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
BEGIN
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.id = p_id;
    IF ws.status IS DISTINCT FROM 'ready' THEN
        PERFORM mesh.raise_bad_move(ws, 'be given a run token');
    END IF;
    UPDATE mesh.run_tokens t SET revoked_at = now(), revoked_reason = 'replaced by a new token'
     WHERE t.run_id = ws.run_id AND t.revoked_at IS NULL;
    INSERT INTO mesh.run_tokens (run_id, token_sha256, expires_at)
    SELECT ws.run_id, p_sha256, now() + s.max_run_lifetime FROM mesh.settings s;
    PERFORM mesh.workspace_event(ws, 'token_minted');
END
$$;

-- An exec's row, committed before the command is sent; the workspace was
-- used.  Only a ready workspace runs commands.
-- A background command just written for a workspace is one too many when the
-- run then has more running than settings.max_background_per_run: refused,
-- its row rolled back with the caller's transaction, before anything starts
-- on the backend.  The workspace's row, locked by the caller's update, keeps
-- two starts of the same run from both seeing room.
CREATE FUNCTION mesh.background_bound(p_workspace_id bigint)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    live bigint;
    bound integer;
    run text;
BEGIN
    SELECT s.max_background_per_run INTO bound FROM mesh.settings s;
    SELECT count(*), min(e.run_id) INTO live, run FROM mesh.execs e
     WHERE e.workspace_id = p_workspace_id AND e.status = 'running' AND e.background;
    IF live > bound THEN
        RAISE EXCEPTION 'run "%" already has % background commands running, the most one run may have', run, bound
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = 'Wait for one to end (mesh_exec_wait) or end one with mesh_exec_kill; an admin may raise '
                         'the bound with mesh.set_policy(max_background_per_run => N) '
                         '(mesh.settings.max_background_per_run).';
    END IF;
END
$$;

CREATE FUNCTION mesh.exec_begin(p_workspace_id bigint, p_argv text[], p_dir text, p_env_names text[],
                                p_stdin_bytes integer, p_timeout_ms bigint, p_background boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    exec_id bigint;
BEGIN
    -- one statement on the hot path; the refusal looks at the row only when it applies
    WITH w AS (UPDATE mesh.workspaces w SET last_used_at = now()
                WHERE w.id = p_workspace_id AND w.status = 'ready' RETURNING w.id, w.run_id)
    INSERT INTO mesh.execs (workspace_id, run_id, argv, dir, env_names, stdin_bytes, timeout_ms, background)
    SELECT w.id, w.run_id, p_argv, p_dir, coalesce(p_env_names, '{}'), p_stdin_bytes, p_timeout_ms,
           coalesce(p_background, false) FROM w
    RETURNING id INTO exec_id;
    IF exec_id IS NULL THEN
        PERFORM mesh.raise_bad_move((SELECT w FROM mesh.workspaces w WHERE w.id = p_workspace_id), 'run a command');
    END IF;
    IF p_background THEN
        PERFORM mesh.background_bound(p_workspace_id);
    END IF;
    RETURN exec_id;
END
$$;

-- How an exec ended, with the run's charge, the bytes of its output stored in
-- the same transaction (mesh.exec_output_counts, charged to the run's output
-- quota here) and each outbound connection the backend refused meanwhile (an
-- egress_denied event each), in one transaction and one update of the
-- workspace row: the result path is hot.
CREATE FUNCTION mesh.exec_finish(p_exec_id bigint, p_status mesh.exec_status, p_exit_code integer,
                                 p_stdout text, p_stderr text, p_truncated boolean,
                                 p_wall_seconds double precision, p_cpu_seconds double precision,
                                 p_charged_seconds double precision, p_charge_basis text, p_error text,
                                 p_memory_peak_bytes bigint, p_egress_denials jsonb,
                                 p_output_stored bigint DEFAULT 0)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws_id bigint;
BEGIN
    IF p_status IS NULL OR p_status = 'running' THEN
        RAISE EXCEPTION 'mesh: an exec cannot finish as %', coalesce(p_status::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH e AS (
        UPDATE mesh.execs e SET status = p_status, exit_code = p_exit_code, stdout = p_stdout, stderr = p_stderr,
               truncated = coalesce(p_truncated, false), wall_seconds = p_wall_seconds, cpu_seconds = p_cpu_seconds,
               charged_seconds = p_charged_seconds, charge_basis = p_charge_basis, error = p_error,
               memory_peak_bytes = p_memory_peak_bytes, finished_at = clock_timestamp()
         WHERE e.id = p_exec_id AND e.status = 'running' RETURNING e.workspace_id)
    UPDATE mesh.workspaces w SET compute_seconds = w.compute_seconds + p_charged_seconds, last_used_at = now(),
                                 output_bytes = w.output_bytes + coalesce(p_output_stored, 0)
      FROM e WHERE w.id = e.workspace_id RETURNING w.id INTO ws_id;
    IF ws_id IS NULL THEN
        -- ended already (the release of its workspace ended a background command): kept as
        -- it is, but what was stored of its output still counts against the run's quota
        IF EXISTS (SELECT 1 FROM mesh.execs e WHERE e.id = p_exec_id) THEN
            IF coalesce(p_output_stored, 0) > 0 THEN
                UPDATE mesh.workspaces w SET output_bytes = w.output_bytes + p_output_stored
                  FROM mesh.execs x WHERE x.id = p_exec_id AND w.id = x.workspace_id;
            END IF;
            RETURN;
        END IF;
        RAISE EXCEPTION 'mesh: exec % does not exist', p_exec_id USING ERRCODE = 'undefined_object';
    END IF;
    IF p_egress_denials IS NOT NULL THEN
        INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
        SELECT 'egress_denied', w.run_id, w.id, w.backend_kind,
               jsonb_build_object('host', d->>'host', 'port', (d->>'port')::integer,
                                  'reason', d->>'reason', 'at', d->>'at', 'exec_id', p_exec_id)
          FROM mesh.workspaces w, jsonb_array_elements(p_egress_denials) d
         WHERE w.id = ws_id;
    END IF;
END
$$;

-- Background commands of a workspace that still run as far as their rows
-- say, ended with one status and reason (its release killed them), charged
-- for the wall time they may have used (at most their timeout).
CREATE FUNCTION mesh.background_execs_end(p_workspace_id bigint, p_status mesh.exec_status, p_error text)
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    WITH ended AS (
        UPDATE mesh.execs e SET status = p_status, error = p_error, finished_at = clock_timestamp(),
               charge_basis = 'wall',
               charged_seconds = least(extract(epoch FROM clock_timestamp() - e.started_at), e.timeout_ms / 1000.0)
         WHERE e.workspace_id = p_workspace_id AND e.status = 'running' AND e.background
        RETURNING e.workspace_id, e.charged_seconds)
    UPDATE mesh.workspaces w SET compute_seconds = w.compute_seconds + c.seconds
      FROM (SELECT sum(charged_seconds) AS seconds FROM ended) c
     WHERE w.id = p_workspace_id AND c.seconds IS NOT NULL;
$$;

-- The background commands worker p_worker of p_nworkers follows: at its start, the ones its
-- predecessor followed, with how far it had read and stored each stream.
CREATE FUNCTION mesh.background_execs(p_worker integer, p_nworkers integer)
RETURNS TABLE (exec_id bigint, run_id text, timeout_ms bigint, started_at timestamptz,
               stdout_bytes bigint, stderr_bytes bigint, stdout_read bigint, stderr_read bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT e.id, e.run_id, e.timeout_ms, e.started_at, e.stdout_bytes, e.stderr_bytes, e.stdout_read, e.stderr_read
      FROM mesh.execs e
     WHERE e.status = 'running' AND e.background
       AND ((hashtext(e.run_id)::bigint & 4294967295) % p_nworkers) = p_worker
     ORDER BY e.id;
$$;

-- The one way execs that no worker will finish are failed: charged for the
-- wall time they may have used (at most their timeout), with the cause as
-- their error.  cause 'restart': the execs of runs that worker p_worker of
-- p_nworkers owns, found when it starts (the server or the worker died);
-- cause 'timeout': any exec a minute past its timeout (the reaper).
-- Returns them, so their commands can be killed in case they still run.
CREATE FUNCTION mesh.fail_lost_execs(p_cause text, p_worker integer DEFAULT NULL, p_nworkers integer DEFAULT NULL)
RETURNS TABLE (exec_id bigint, run_id text, workspace_id bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF p_cause IS NULL OR p_cause NOT IN ('restart', 'timeout')
       OR (p_cause = 'restart' AND (p_worker IS NULL OR p_nworkers IS NULL OR p_worker < 0 OR p_worker >= p_nworkers)) THEN
        RAISE EXCEPTION 'mesh: execs are lost to a restart (of worker p_worker of p_nworkers) or a timeout, not %',
                        coalesce(p_cause, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH lost AS (
        UPDATE mesh.execs e SET status = 'error', finished_at = clock_timestamp(), charge_basis = 'wall',
               error = CASE p_cause WHEN 'restart'
                            THEN 'interrupted: the server or a mesh worker restarted while the command ran'
                            ELSE 'lost: no worker finished it within its timeout' END,
               charged_seconds = least(extract(epoch FROM clock_timestamp() - e.started_at), e.timeout_ms / 1000.0)
         WHERE e.status = 'running'
           AND CASE p_cause
               -- a restarted worker follows its background commands again (mesh.background_execs)
               WHEN 'restart' THEN ((hashtext(e.run_id)::bigint & 4294967295) % p_nworkers) = p_worker
                                   AND NOT e.background
               ELSE e.started_at + e.timeout_ms * interval '1 millisecond' + interval '1 minute' < clock_timestamp() END
        RETURNING e.id, e.run_id, e.workspace_id, e.charged_seconds),
    charged AS (
        UPDATE mesh.workspaces w SET compute_seconds = w.compute_seconds + l.seconds
          FROM (SELECT l.workspace_id, sum(l.charged_seconds) AS seconds FROM lost l GROUP BY l.workspace_id) l
         WHERE w.id = l.workspace_id)
    SELECT l.id, l.run_id, l.workspace_id FROM lost l;
END
$$;
------------------------------------------------------------------------------
-- Run ownership (mesh.settings.run_ownership, on by default): a run belongs
-- to the role that declared it, a snapshot to the role that owns the run it
-- was captured from, an agent to the role that claimed it and those an admin
-- granted it to.  The workers check it for every call, the views the harness
-- reads filter by it, so several harness services share a database without
-- reaching each other.  An admin turns it off for a single-tenant install
-- (mesh.set_policy(run_ownership => false)): every harness role then sees and
-- drives every run, agent and snapshot.
------------------------------------------------------------------------------
-- May role caller see and drive what owner owns?  Its owner's members,
-- mesh_admin's members and superusers always may.  PL/pgSQL, not SQL: a SQL
-- function that cannot be inlined (this one is SECURITY DEFINER) is parsed
-- and planned again for every statement that calls it, and the workers call
-- it for every call; PL/pgSQL keeps its plan for the session.
-- (pg_has_role answers false for a role dropped since it was recorded.)
CREATE FUNCTION mesh.may_drive(owner regrole, caller oid) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RETURN (SELECT NOT s.run_ownership OR owner IS NULL OR caller IS NULL
                   OR pg_has_role(caller, owner::oid, 'MEMBER') OR pg_has_role(caller, 'mesh_admin', 'MEMBER')
              FROM mesh.settings s);
END
$$;

-- May role caller declare runs under the agent?  A role the agent was
-- claimed by or granted to, or one of its members; an admin always may.
CREATE FUNCTION mesh.agent_usable(p_agent_id text, caller oid) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF caller IS NULL OR NOT (SELECT s.run_ownership FROM mesh.settings s)
       OR pg_has_role(caller, 'mesh_admin', 'MEMBER') THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM mesh.agent_roles r
                    WHERE r.agent_id = p_agent_id AND pg_has_role(caller, r.role_oid::oid, 'MEMBER'));
END
$$;

-- At a run's declaration (mesh.workspace_declare, in the worker's
-- transaction), when the declaring role may not use the agent
-- (mesh.agent_usable): it claims the agent if nobody has (under the agent's
-- row lock, so two roles cannot both claim it), else is refused.  An agent
-- that holds secrets is never claimed: an admin gives it (mesh.agent_grant),
-- as the secrets.  The refusal names nothing of who uses the agent.
CREATE FUNCTION mesh.agent_claim(p_agent_id text, caller oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    claimed_at timestamptz := (mesh.agent_lock(p_agent_id)).access_set_at;
BEGIN
    IF claimed_at IS NULL AND NOT EXISTS (SELECT 1 FROM mesh.secrets s WHERE s.agent_id = p_agent_id) THEN
        INSERT INTO mesh.agent_roles (agent_id, role_oid, how) VALUES (p_agent_id, caller::regrole, 'claimed');
        UPDATE mesh.agents a SET access_set_at = now() WHERE a.agent_id = p_agent_id;
        INSERT INTO mesh.events (kind, detail)
        VALUES ('agent_claimed', jsonb_build_object('agent_id', p_agent_id, 'role', caller::regrole::text));
        RETURN;
    END IF;
    -- a fresh statement: a grant committed while this one waited for the lock counts
    IF mesh.agent_usable(p_agent_id, caller) THEN
        RETURN;
    END IF;
    -- not even the agent's name: the caller's own words are all it is told
    RAISE EXCEPTION 'this role may not declare runs under the agent it named'
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'An agent serves the role that declared its first run and the roles an admin grants it to with mesh.agent_grant(agent_id, role); an agent holding secrets only those. Use an agent of this role''s own.';
END
$$;

-- Admin: let role (and its members) declare runs under the agent; the agent
-- is no longer claimable.
CREATE FUNCTION mesh.agent_grant(agent_id text, role regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_grant', ARRAY['agent_id', 'role'],
        ARRAY[agent_grant.agent_id IS NULL, agent_grant.role IS NULL]);
    INSERT INTO mesh.agents AS a (agent_id, access_set_at) VALUES (agent_grant.agent_id, now())
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE SET access_set_at = coalesce(a.access_set_at, now());
    INSERT INTO mesh.agent_roles AS r (agent_id, role_oid, how) VALUES (agent_grant.agent_id, agent_grant.role, 'granted')
    ON CONFLICT ON CONSTRAINT agent_roles_pkey DO NOTHING;
    INSERT INTO mesh.events (kind, detail)
    VALUES ('agent_granted', jsonb_build_object('agent_id', agent_grant.agent_id, 'role', agent_grant.role::text,
                                                'by', session_user));
END
$$;

-- Admin: role no longer declares runs under the agent (claimed or granted);
-- its live runs there lose their secret grants at once (the broker refuses
-- them), unless it may still use the agent through another role.  The agent
-- stays unclaimable.
CREATE FUNCTION mesh.agent_revoke(agent_id text, role regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    cut integer;
BEGIN
    PERFORM mesh.require_args('agent_revoke', ARRAY['agent_id', 'role'],
        ARRAY[agent_revoke.agent_id IS NULL, agent_revoke.role IS NULL]);
    DELETE FROM mesh.agent_roles r WHERE r.agent_id = agent_revoke.agent_id AND r.role_oid = agent_revoke.role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % has no access of its own to agent "%"', agent_revoke.role, agent_revoke.agent_id
            USING ERRCODE = 'undefined_object', HINT = 'See mesh.agent_access.';
    END IF;
    WITH revoked AS (
        UPDATE mesh.grants g SET revoked_at = now(), revoked_reason = 'the run''s role lost access to its agent'
          FROM mesh.workspaces w
         WHERE g.run_id = w.run_id AND g.revoked_at IS NULL AND w.agent_id = agent_revoke.agent_id
           AND w.status NOT IN ('released', 'failed') AND w.owner_role IS NOT NULL
           AND NOT mesh.agent_usable(agent_revoke.agent_id, w.owner_role::oid)
        RETURNING 1)
    SELECT count(*) INTO cut FROM revoked;
    INSERT INTO mesh.events (kind, detail)
    VALUES ('agent_revoked', jsonb_build_object('agent_id', agent_revoke.agent_id, 'role', agent_revoke.role::text,
                                                'by', session_user, 'grants_revoked', cut));
END
$$;

-- Admin: who may declare runs under which agent, and how they came to.
CREATE VIEW mesh.agent_access AS
SELECT r.agent_id, r.role_oid AS role, r.how, r.granted_at FROM mesh.agent_roles r;
------------------------------------------------------------------------------
-- Views for operators and harnesses (no credential, no env values).
------------------------------------------------------------------------------
CREATE VIEW mesh.backend_catalog AS
SELECT b.name, b.driver, b.enabled, b.catalog_order, b.config, b.max_size,
       (c.backend IS NOT NULL) AS has_credential, c.set_at AS credential_set_at,
       b.created_at, b.updated_at
  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name;

CREATE VIEW mesh.live_workspaces AS
SELECT w.run_id, w.parent_run_id, w.agent_id, w.created_by_actor_id, w.status, w.status_reason,
       w.backend_kind, w.size, w.capabilities, w.compute_seconds,
       w.created_at, w.materialized_at, w.last_used_at,
       (SELECT count(*) FROM mesh.execs e WHERE e.workspace_id = w.id) AS execs,
       (SELECT count(*) FROM mesh.execs e WHERE e.workspace_id = w.id AND e.status = 'running') AS running_execs
  FROM mesh.workspaces w
 WHERE w.status NOT IN ('released') AND mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

CREATE VIEW mesh.run_workspaces AS
SELECT w.run_id, w.parent_run_id, w.agent_id, w.created_by_actor_id, w.status, w.status_reason,
       w.backend_kind, w.size, w.release_outcome, w.release_reason, w.compute_seconds,
       w.created_at, w.materialized_at, w.last_used_at, w.released_at, w.owner_role
  FROM mesh.workspaces w
 WHERE mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

-- An exec's NOTIFY channel: its id and its row's random key, so that only a
-- role that may read the exec (mesh_exec_channel) can LISTEN on it.
CREATE FUNCTION mesh.exec_channel_name(p_exec_id bigint, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT 'mesh_exec_' || p_exec_id || '_' || p_key
$$;

CREATE VIEW mesh.exec_log AS
SELECT e.id AS exec_id, e.run_id, w.agent_id, w.created_by_actor_id, e.argv, e.dir, e.env_names,
       e.status, e.exit_code, e.truncated, e.wall_seconds, e.cpu_seconds, e.memory_peak_bytes, e.charged_seconds,
       e.charge_basis, e.error, e.started_at, e.finished_at, e.stdout, e.stderr,
       e.stdout_bytes, e.stderr_bytes, e.stdout_dropped, e.stderr_dropped,
       e.output_stopped, e.output_unstored,
       mesh.exec_channel_name(e.id, e.notify_key) AS channel
  FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
 WHERE mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

-- Spend: what each run and each agent used, and on what basis it was charged.
CREATE VIEW mesh.spend_by_run AS
SELECT w.run_id, w.agent_id, w.created_by_actor_id, w.status, w.backend_kind,
       w.compute_seconds, l.max_compute_seconds,
       (SELECT count(*) FROM mesh.execs e WHERE e.workspace_id = w.id) AS execs,
       (SELECT coalesce(sum(e.charged_seconds) FILTER (WHERE e.charge_basis = 'cpu'), 0)
          FROM mesh.execs e WHERE e.workspace_id = w.id) AS cpu_charged_seconds,
       (SELECT coalesce(sum(e.charged_seconds) FILTER (WHERE e.charge_basis = 'wall'), 0)
          FROM mesh.execs e WHERE e.workspace_id = w.id) AS wall_charged_seconds,
       w.status_reason
  FROM mesh.workspaces w JOIN mesh.run_limits l ON l.workspace_id = w.id
 WHERE mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

-- (20_retention.sql redefines it: what expired runs left in mesh.usage_daily counts too)
CREATE VIEW mesh.spend_by_agent AS
SELECT w.agent_id, count(*) AS runs,
       count(*) FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS live_workspaces,
       sum(w.compute_seconds) AS compute_seconds,
       count(*) FILTER (WHERE w.status_reason_code = 'budget_exhausted') AS runs_stopped_by_budget
  FROM mesh.workspaces w GROUP BY w.agent_id;

CREATE VIEW mesh.event_log AS
SELECT id, at, kind, run_id, backend, detail FROM mesh.events;
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
------------------------------------------------------------------------------
-- Workspace network access (egress): the instance policy, captured per
-- workspace at materialization.  No saved row means mode "open".
------------------------------------------------------------------------------

-- The saved policy as written (mesh.set_egress_policy).
CREATE TABLE mesh.egress_settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    policy     jsonb NOT NULL,
    set_at     timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('mesh.egress_settings', '');

-- The built-in allowlist (source hosts and package registries): the one list.
CREATE FUNCTION mesh.egress_default_domains() RETURNS text[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY['github.com', '*.github.com', '*.githubusercontent.com',
                 'gitlab.com', '*.gitlab.com', 'bitbucket.org',
                 'registry.npmjs.org', 'registry.yarnpkg.com',
                 'pypi.org', 'files.pythonhosted.org',
                 'crates.io', 'index.crates.io', 'static.crates.io',
                 'proxy.golang.org', 'sum.golang.org',
                 'rubygems.org', 'repo.maven.apache.org', 'repo1.maven.org',
                 'deb.debian.org', 'security.debian.org',
                 'archive.ubuntu.com', 'security.ubuntu.com', 'dl-cdn.alpinelinux.org']
$$;

-- A domain pattern: a DNS name with at least two labels, lower case, optionally
-- "*." as its whole first label.  No IP addresses, ports or schemes.
CREATE FUNCTION mesh.egress_domain_valid(d text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT d IS NOT NULL AND length(d) <= 253
       AND d ~ '^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'
$$;

-- Parses a policy document into {"mode", "domains", "uncontrolled"}, or raises
-- naming what is wrong.  The mode is always named: no version wrote a policy without one.
CREATE FUNCTION mesh.egress_policy_parse(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    mode text;
    unc text;
    doms text[] := '{}';
    k text;
    d jsonb;
BEGIN
    IF p IS NULL OR jsonb_typeof(p) <> 'object' THEN
        RAISE EXCEPTION 'workspace egress policy must be a JSON object'
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'Example: {"mode": "allowlist", "domains": ["api.example.com"], "uncontrolled": "refuse"}.';
    END IF;
    FOR k IN SELECT jsonb_object_keys(p) LOOP
        IF k NOT IN ('mode', 'domains', 'uncontrolled') THEN
            RAISE EXCEPTION 'workspace egress policy: unknown field "%"', k
                  USING ERRCODE = 'invalid_parameter_value', HINT = 'Fields are mode, domains and uncontrolled.';
        END IF;
    END LOOP;
    IF p ? 'mode' THEN
        mode := CASE WHEN jsonb_typeof(p->'mode') = 'string' THEN p->>'mode' END;
        IF mode IS NULL OR mode NOT IN ('open', 'allowlist') THEN
            RAISE EXCEPTION 'workspace egress policy: mode must be "open" or "allowlist", not %', p->'mode'
                  USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSE
        RAISE EXCEPTION 'workspace egress policy: mode is required ("open" or "allowlist")'
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'Example: {"mode": "allowlist", "domains": ["api.example.com"]}.';
    END IF;
    IF p ? 'domains' THEN
        IF jsonb_typeof(p->'domains') <> 'array' THEN
            RAISE EXCEPTION 'workspace egress policy: domains must be an array of domain names'
                  USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOR d IN SELECT jsonb_array_elements(p->'domains') LOOP
            IF jsonb_typeof(d) <> 'string' OR NOT egress_domain_valid(d #>> '{}') THEN
                RAISE EXCEPTION 'workspace egress policy: % is not a domain name', d
                      USING ERRCODE = 'invalid_parameter_value',
                            HINT = 'Lower-case DNS names such as "api.example.com"; a wildcard only as the whole first label ("*.example.com"); no IP addresses, ports or schemes.';
            END IF;
            doms := doms || (d #>> '{}');
        END LOOP;
    END IF;
    unc := coalesce(p->>'uncontrolled', 'refuse');
    IF (p ? 'uncontrolled' AND jsonb_typeof(p->'uncontrolled') <> 'string') OR unc NOT IN ('refuse', 'allow') THEN
        RAISE EXCEPTION 'workspace egress policy: uncontrolled must be "refuse" or "allow"'
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN jsonb_build_object('mode', mode,
                              'domains', to_jsonb(ARRAY(SELECT DISTINCT x FROM unnest(doms) x ORDER BY 1)),
                              'uncontrolled', unc);
END
$$;

-- The saved row parsed, or the install default; a row that cannot be parsed
-- raises (so acquisition fails rather than silently widening access).
CREATE FUNCTION mesh.egress_policy_saved() RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    raw jsonb;
BEGIN
    SELECT s.policy INTO raw FROM mesh.egress_settings s;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('mode', 'open', 'domains', '[]'::jsonb, 'uncontrolled', 'refuse');
    END IF;
    BEGIN
        RETURN egress_policy_parse(raw);
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'the saved workspace egress policy is unreadable: %', SQLERRM
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'An admin saves a valid one with mesh.set_egress_policy(); until then no workspace is acquired.';
    END;
END
$$;

-- GET: the policy in force and the built-in domains it adds in allowlist mode.
CREATE FUNCTION mesh.egress_policy() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT egress_policy_saved()
           || jsonb_build_object('default_domains', to_jsonb(egress_default_domains()),
                                 'saved', EXISTS (SELECT 1 FROM mesh.egress_settings))
$$;

-- PUT: validate and save; affects workspaces created from now on only.
CREATE FUNCTION mesh.set_egress_policy(policy jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    parsed jsonb;
BEGIN
    PERFORM mesh.require_args('set_egress_policy', ARRAY['policy'], ARRAY[policy IS NULL]);
    parsed := egress_policy_parse(policy);
    INSERT INTO mesh.egress_settings (policy) VALUES (parsed)
    ON CONFLICT (singleton) DO UPDATE SET policy = excluded.policy, set_at = now();
    INSERT INTO mesh.events (kind, detail) VALUES ('egress_policy_set', parsed);
    RETURN egress_policy();
END
$$;

-- What a new workspace on a backend with these capabilities gets, recorded in
-- mesh.workspaces.egress by the worker in the transaction that picks the
-- backend (before the backend is called).  Raises when the backend cannot
-- enforce the allowlist and the policy refuses such backends.
CREATE FUNCTION mesh.workspace_egress(backend text, caps jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    p jsonb := egress_policy_saved();
    capable boolean := coalesce((caps->>'egress_control')::boolean, false);
BEGIN
    IF p->>'mode' = 'open' THEN
        RETURN jsonb_build_object('mode', 'open', 'policy_mode', 'open', 'enforced', capable);
    ELSIF capable THEN
        RETURN jsonb_build_object('mode', 'allowlist', 'policy_mode', 'allowlist', 'enforced', true,
            'domains', to_jsonb(ARRAY(SELECT DISTINCT x FROM unnest(egress_default_domains()
                    || ARRAY(SELECT jsonb_array_elements_text(p->'domains'))) x ORDER BY 1)));
    ELSIF p->>'uncontrolled' = 'allow' THEN
        RETURN jsonb_build_object('mode', 'open', 'policy_mode', 'allowlist', 'enforced', false,
                                  'uncontrolled', 'allow');
    END IF;
    RAISE EXCEPTION 'backend "%" cannot enforce the workspace egress allowlist (egress_control is false)', backend
          USING ERRCODE = 'object_not_in_prerequisite_state',
                HINT = 'Pin the agent to a backend with egress_control, or accept open egress on such backends with mesh.set_egress_policy(''{"mode": "allowlist", ..., "uncontrolled": "allow"}'').';
END
$$;

-- "What could this run see" on the network: its workspace's captured policy.
CREATE FUNCTION mesh.run_network(p_run_id text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT mesh.require_args('run_network', ARRAY['run_id'], ARRAY[p_run_id IS NULL]);
    SELECT coalesce(w.egress, jsonb_build_object('mode', 'not materialized'))
           || jsonb_build_object('backend', w.backend_kind, 'status', w.status::text)
      FROM mesh.workspaces w WHERE w.run_id = p_run_id
$$;
------------------------------------------------------------------------------
-- Project-state snapshots (README "Snapshots"): a run's /workspace captured so
-- that later runs of the same project start from it (a checked-out repository,
-- installed dependencies, warm caches) instead of an empty tree.  The base
-- image is never part of one.  Rows are written by mesh workers (before the
-- backend call, every change in a worker transaction) and by the admin's
-- mesh.snapshot_retire.
------------------------------------------------------------------------------
-- Run ownership: the roles (and their members) a snapshot's owner shared it
-- with (mesh_snapshot_share): they may start runs from it too.
CREATE TABLE mesh.snapshot_shares (
    snapshot_id bigint NOT NULL REFERENCES mesh.snapshots (id),
    role_oid    regrole NOT NULL,
    shared_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (snapshot_id, role_oid)
);
SELECT pg_catalog.pg_extension_config_dump('mesh.snapshot_shares',
    $$WHERE snapshot_id IN (SELECT s.id FROM mesh.snapshots s WHERE s.status <> 'capturing')$$);

-- May role caller start a run from (or see) the snapshot of owner?  Its
-- owner's members and admins may (mesh.may_drive), and the roles it was
-- shared with and their members.  A definer's function, as may_drive: the
-- harness's view of snapshots calls it.
CREATE FUNCTION mesh.snapshot_usable(p_id bigint, p_owner regrole, caller oid) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RETURN mesh.may_drive(p_owner, caller)
        OR EXISTS (SELECT 1 FROM mesh.snapshot_shares sh
                    WHERE sh.snapshot_id = p_id AND pg_has_role(caller, sh.role_oid::oid, 'MEMBER'));
END
$$;

-- The one error for a snapshot that does not exist and one the role may not
-- use: the same words and code, so ids cannot be probed.
CREATE FUNCTION mesh.raise_unknown_snapshot(p_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'snapshot % does not exist or is not shared with this role', p_id
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'mesh.project_snapshots lists the snapshots this role may start from; their owner shares one with mesh_snapshot_share(snapshot_id, role).';
END
$$;

-- A project name as an error message may show it: no control characters, bounded.
CREATE FUNCTION mesh.shown_name(p text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT regexp_replace(left(p, 64), '[^[:print:]]', '?', 'g') || CASE WHEN length(p) > 64 THEN '...' ELSE '' END
$$;

-- What mesh_acquire's project and from_snapshot declare: the run's project
-- (the snapshot's when only from_snapshot is given), or a clear error.
-- Writes nothing; the declaring worker stores the result on the pending row.
CREATE FUNCTION mesh.snapshot_declare(p_project text, p_from_snapshot bigint, p_caller oid DEFAULT NULL,
                                      OUT project text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    s mesh.snapshots;
BEGIN
    IF p_project IS NOT NULL AND NOT mesh.project_name_valid(p_project) THEN
        RAISE EXCEPTION 'project name "%" is not valid', mesh.shown_name(p_project)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A project is 1 to 200 characters: letters, digits and . _ / @ : + -, starting with a letter, a digit or @, without ".." or "//" (e.g. github.com/org/repo).';
    END IF;
    project := p_project;
    IF p_from_snapshot IS NULL THEN
        RETURN;
    END IF;
    SELECT * INTO s FROM mesh.snapshots WHERE id = p_from_snapshot;
    IF NOT FOUND OR NOT mesh.snapshot_usable(s.id, s.owner_role, p_caller) THEN
        PERFORM mesh.raise_unknown_snapshot(p_from_snapshot);
    END IF;
    IF s.status <> 'ready' THEN
        RAISE EXCEPTION 'snapshot % is %, not ready', p_from_snapshot, s.status
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = CASE WHEN s.status = 'capturing' THEN 'Wait until its capture has finished.'
                              ELSE format('Start from project "%s"''s current snapshot (mesh.project_snapshots), or pass only project.', mesh.shown_name(s.project)) END;
    END IF;
    IF p_project IS NOT NULL AND p_project <> s.project THEN
        RAISE EXCEPTION 'snapshot % belongs to project "%", not "%"', p_from_snapshot,
                        mesh.shown_name(s.project), mesh.shown_name(p_project)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Omit project to take the snapshot''s, or name a snapshot of this project.';
    END IF;
    project := s.project;
END
$$;

-- At materialization, in the worker's transaction that records the backend:
-- which snapshot the workspace's /workspace stands on, recorded on its row,
-- or why none applies (notice, for the set-up NOTICE).  A snapshot the run
-- named explicitly that cannot be used on this backend raises: such a run is
-- never silently started empty.
CREATE FUNCTION mesh.snapshot_choose(p_workspace_id bigint, p_backend text, p_can_snapshot boolean,
                                     OUT snapshot_id bigint, OUT external_ref text, OUT notice text)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    w mesh.workspaces;
    s mesh.snapshots;
BEGIN
    SELECT * INTO STRICT w FROM mesh.workspaces WHERE id = p_workspace_id;
    IF w.from_snapshot IS NOT NULL THEN
        SELECT * INTO STRICT s FROM mesh.snapshots WHERE id = w.from_snapshot;
        -- a share revoked since the declaration stops the run here
        IF NOT mesh.snapshot_usable(s.id, s.owner_role, w.owner_role) THEN
            PERFORM mesh.raise_unknown_snapshot(s.id);
        ELSIF NOT p_can_snapshot THEN
            RAISE EXCEPTION 'run "%" starts from snapshot %, but backend "%" cannot snapshot', w.run_id, s.id, p_backend
                USING ERRCODE = 'feature_not_supported',
                      HINT = 'Pin the agent to a backend that declares the snapshot capability, or acquire without from_snapshot.';
        ELSIF s.backend <> p_backend THEN
            RAISE EXCEPTION 'snapshot % is held by backend "%", but run "%" is materialized on backend "%"',
                            s.id, s.backend, w.run_id, p_backend
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = format('Pin agent "%s" to backend "%s" (mesh.agent_set), or acquire without from_snapshot.', w.agent_id, s.backend);
        ELSIF s.status <> 'ready' THEN
            RAISE EXCEPTION 'snapshot % was % at %', s.id, s.status, coalesce(s.retired_at, s.reclaimed_at, now())
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = format('Release this run and start again from project "%s"''s current snapshot.', mesh.shown_name(s.project));
        END IF;
    ELSIF w.project IS NULL THEN
        notice := 'the run names no project: it starts empty';
        RETURN;
    ELSIF NOT p_can_snapshot THEN
        notice := format('backend "%s" cannot snapshot: project "%s" starts empty', p_backend, w.project);
        RETURN;
    ELSE
        -- the run's owner's own current snapshot of the project, else the newest one shared with it
        SELECT * INTO s FROM mesh.snapshots x
         WHERE x.project = w.project AND x.backend = p_backend AND x.status = 'ready'
           AND mesh.snapshot_usable(x.id, x.owner_role, w.owner_role)
         ORDER BY x.owner_role IS NOT DISTINCT FROM w.owner_role DESC, x.ready_at DESC LIMIT 1;
        IF NOT FOUND THEN
            notice := format('no snapshot yet for project "%s": it starts empty', w.project);
            RETURN;
        END IF;
    END IF;
    UPDATE mesh.workspaces SET snapshot_id = s.id WHERE id = p_workspace_id;
    snapshot_id := s.id;
    external_ref := s.external_ref;
    notice := format('snapshot %s of project "%s": %s in %s files, captured %s ago', s.id, s.project,
                     pg_size_pretty(s.size_bytes), s.file_count, date_trunc('second', now() - s.ready_at));
END
$$;

-- mesh_snapshot(run_id), before the backend call: checks that the run can be
-- captured and inserts its 'capturing' row (the worker then records the
-- external_ref its driver chooses, mesh.snapshot_named, and commits).
CREATE FUNCTION mesh.snapshot_begin(p_run_id text, p_can_snapshot boolean) RETURNS mesh.snapshots
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    w mesh.workspaces;
    s mesh.snapshots;
BEGIN
    SELECT * INTO w FROM mesh.workspaces WHERE run_id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run "%" has no workspace', p_run_id
            USING ERRCODE = 'undefined_object', HINT = 'Declare it with mesh_acquire(run_id, agent_id, actor_id, project => ...).';
    ELSIF w.project IS NULL THEN
        RAISE EXCEPTION 'run "%" names no project', p_run_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Declare the run with mesh_acquire(..., project => ''name''): a snapshot is its project''s.';
    ELSIF w.status IN ('released', 'releasing', 'failed') THEN
        RAISE EXCEPTION 'run "%" is %', p_run_id, w.status
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Capture a run before it is released.';
    ELSIF w.status = 'pending' AND w.external_ref IS NOT NULL THEN
        RAISE EXCEPTION 'the workspace of run "%" is hibernated', p_run_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Its next mesh_exec, mesh_read_file or mesh_write_file wakes it; capture it then.';
    ELSIF w.status <> 'ready' THEN
        RAISE EXCEPTION 'run "%" has no materialized workspace yet (it is %)', p_run_id, w.status
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Its first mesh_exec, mesh_read_file or mesh_write_file materializes it.';
    ELSIF NOT p_can_snapshot THEN
        RAISE EXCEPTION 'backend "%" of run "%" cannot snapshot', w.backend_kind, p_run_id
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Runs on backends that declare the snapshot capability can be captured.';
    END IF;
    INSERT INTO mesh.snapshots (project, backend, source_run_id, actor_id, owner_role)
    VALUES (w.project, w.backend_kind, w.run_id, w.created_by_actor_id, w.owner_role)
    RETURNING * INTO s;
    INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail)
    VALUES ('snapshot_capture', w.run_id, w.id, w.backend_kind, jsonb_build_object('snapshot', s.id, 'project', s.project));
    RETURN s;
END
$$;

-- The name the backend's driver chose for a capture (from its id), recorded
-- with its row before the backend is called.
CREATE FUNCTION mesh.snapshot_named(p_id bigint, p_ref text) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.snapshots SET external_ref = p_ref
     WHERE id = p_id AND status = 'capturing' AND external_ref IS NULL
$$;

-- The capture ended: ready (the project's previous current snapshot on this
-- backend is retired in the same transaction) or failed with the reason.  A
-- row the reaper already settled is left as it is.
CREATE FUNCTION mesh.snapshot_finish(p_id bigint, p_ok boolean, p_size_bytes bigint,
                                     p_file_count bigint, p_reason text) RETURNS mesh.snapshots
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    s mesh.snapshots;
BEGIN
    SELECT * INTO STRICT s FROM mesh.snapshots WHERE id = p_id FOR UPDATE;
    IF s.status <> 'capturing' THEN
        RETURN s;
    END IF;
    IF p_ok THEN
        -- serialise captures of one project: the current row is locked first
        -- (the owner's: another owner's snapshot of a project of the same name is not replaced)
        PERFORM 1 FROM mesh.snapshots x WHERE x.project = s.project AND x.backend = s.backend
                                          AND x.owner_role IS NOT DISTINCT FROM s.owner_role
                                          AND x.status = 'ready' FOR UPDATE;
        UPDATE mesh.snapshots x SET status = 'retired', retired_at = now(),
                                    status_reason = format('replaced by snapshot %s', p_id)
         WHERE x.project = s.project AND x.backend = s.backend
           AND x.owner_role IS NOT DISTINCT FROM s.owner_role AND x.status = 'ready';
        IF FOUND THEN
            PERFORM mesh.snapshot_reclaim_soon();
        END IF;
        UPDATE mesh.snapshots x SET status = 'ready', ready_at = now(), size_bytes = p_size_bytes,
                                    file_count = p_file_count
         WHERE x.id = p_id RETURNING * INTO s;
    ELSE
        UPDATE mesh.snapshots x SET status = 'failed', status_reason = coalesce(p_reason, 'capture failed')
         WHERE x.id = p_id RETURNING * INTO s;
    END IF;
    INSERT INTO mesh.events (kind, run_id, backend, detail)
    VALUES (CASE WHEN p_ok THEN 'snapshot_ready' ELSE 'snapshot_failed' END, s.source_run_id, s.backend,
            jsonb_build_object('snapshot', s.id, 'project', s.project, 'size_bytes', s.size_bytes,
                               'file_count', s.file_count, 'reason', s.status_reason));
    RETURN s;
END
$$;

-- The admin retires a snapshot: no new run starts from it; the reaper reclaims
-- it as soon as no live workspace stands on it (woken at commit, or by the
-- release of the last one).
CREATE FUNCTION mesh.snapshot_retire(id bigint) RETURNS mesh.snapshots
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    s mesh.snapshots;
BEGIN
    PERFORM mesh.require_args('snapshot_retire', ARRAY['id'], ARRAY[snapshot_retire.id IS NULL]);
    SELECT * INTO s FROM mesh.snapshots x WHERE x.id = snapshot_retire.id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'snapshot % does not exist', snapshot_retire.id
            USING ERRCODE = 'undefined_object', HINT = 'mesh.project_snapshots lists the snapshots there are.';
    ELSIF s.status IN ('retired', 'reclaimed', 'failed') THEN
        RETURN s;   -- already out of use: retiring is idempotent
    ELSIF s.status = 'capturing' THEN
        RAISE EXCEPTION 'snapshot % is still being captured', s.id
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Retire it once it is ready.';
    END IF;
    UPDATE mesh.snapshots x SET status = 'retired', retired_at = now(),
                                status_reason = format('retired by %s', session_user)
     WHERE x.id = s.id RETURNING * INTO s;
    INSERT INTO mesh.events (kind, run_id, backend, detail)
    VALUES ('snapshot_retired', s.source_run_id, s.backend,
            jsonb_build_object('snapshot', s.id, 'project', s.project, 'by', session_user));
    IF mesh.snapshot_live_workspaces(s.id) = 0 THEN
        PERFORM mesh.snapshot_reclaim_soon();
    END IF;
    RETURN s;
END
$$;

-- Live workspaces standing on a snapshot (anything not released holds it; a
-- failed run's workspace keeps its status once released, with released_at).
CREATE FUNCTION mesh.snapshot_live_workspaces(p_id bigint) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT count(*) FROM mesh.workspaces w
     WHERE w.snapshot_id = p_id AND w.status <> 'released' AND w.released_at IS NULL
$$;

-- For the reaper: backends with retired snapshots that no live workspace
-- stands on (each backend gets its own share of a sweep), and per backend the
-- oldest of them, at most p_limit.
CREATE FUNCTION mesh.snapshot_reclaimable_backends() RETURNS SETOF text
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT DISTINCT s.backend FROM mesh.snapshots s
     WHERE s.status = 'retired' AND mesh.snapshot_live_workspaces(s.id) = 0
     ORDER BY 1
$$;

CREATE FUNCTION mesh.snapshot_reclaimable(p_backend text, p_limit integer) RETURNS SETOF mesh.snapshots
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT * FROM mesh.snapshots s
     WHERE s.backend = p_backend AND s.status = 'retired' AND mesh.snapshot_live_workspaces(s.id) = 0
     ORDER BY s.retired_at, s.id LIMIT p_limit
$$;

-- The backend deleted a retired snapshot (or had it no longer).
CREATE FUNCTION mesh.snapshot_reclaimed(p_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    UPDATE mesh.snapshots SET status = 'reclaimed', reclaimed_at = now()
     WHERE id = p_id AND status = 'retired';
    IF FOUND THEN
        INSERT INTO mesh.events (kind, backend, detail)
        SELECT 'snapshot_reclaimed', s.backend, jsonb_build_object('snapshot', s.id, 'project', s.project)
          FROM mesh.snapshots s WHERE s.id = p_id;
    END IF;
END
$$;

-- Reconciliation of one backend's snapshot list (p_listed: [{"ref", "state"}],
-- state "ready" or "capturing") with the rows: a row whose snapshot vanished
-- is failed; a capture no worker can still be waiting for (older than
-- p_capture_grace, unknown to the backend) is failed; each is an event.
-- Returns those, and the refs no row explains, which the caller deletes and
-- logs.
CREATE FUNCTION mesh.snapshot_reconcile(p_backend text, p_listed jsonb, p_capture_grace interval)
RETURNS TABLE (failed boolean, snapshot_id bigint, external_ref text)
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    WITH listed AS (
        SELECT e->>'ref' AS ref, e->>'state' AS state FROM jsonb_array_elements(p_listed) e
    ), settled AS (
        UPDATE mesh.snapshots s
           SET status = 'failed',
               status_reason = CASE WHEN s.status = 'capturing'
                                    THEN 'the capture was interrupted (the backend does not have it)'
                                    ELSE 'the backend no longer has this snapshot' END
         WHERE s.backend = p_backend
           AND ((s.status IN ('ready', 'retired')
                 AND NOT EXISTS (SELECT 1 FROM listed l WHERE l.ref = s.external_ref AND l.state = 'ready'))
             OR (s.status = 'capturing' AND s.created_at < now() - p_capture_grace
                 AND NOT EXISTS (SELECT 1 FROM listed l WHERE l.ref = s.external_ref)))
        RETURNING s.id, s.external_ref, s.source_run_id, s.status_reason
    ), logged AS (
        INSERT INTO mesh.events (kind, run_id, backend, detail)
        SELECT 'snapshot_failed', t.source_run_id, p_backend,
               jsonb_build_object('snapshot', t.id, 'reason', t.status_reason)
          FROM settled t
    )
    SELECT true, t.id, t.external_ref FROM settled t
    UNION ALL
    SELECT false, NULL::bigint, l.ref FROM listed l
     WHERE l.state = 'ready' AND l.ref IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM mesh.snapshots s
                        WHERE s.backend = p_backend AND s.external_ref = l.ref
                          AND s.status IN ('capturing', 'ready', 'retired'))
$$;

-- Every snapshot not yet reclaimed, per project and backend, whether it is
-- the current one, its age and size, and how many live workspaces stand on
-- it: for operators all, for a harness role those it may start from.
CREATE VIEW mesh.project_snapshots AS
SELECT s.project, s.backend, s.id AS snapshot_id, s.status, (s.status = 'ready') AS current,
       date_trunc('second', now() - coalesce(s.ready_at, s.created_at)) AS age,
       s.size_bytes, s.file_count,
       (SELECT count(*) FROM mesh.workspaces w     -- mesh.snapshot_live_workspaces, for any reader
         WHERE w.snapshot_id = s.id AND w.status <> 'released' AND w.released_at IS NULL) AS live_workspaces,
       s.source_run_id, s.actor_id, s.status_reason, s.created_at, s.ready_at, s.retired_at, s.owner_role
  FROM mesh.snapshots s
 WHERE s.status <> 'reclaimed'
   AND mesh.snapshot_usable(s.id, s.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user))
 ORDER BY s.project, s.backend, s.created_at DESC, s.id;
------------------------------------------------------------------------------
-- The harness API (in the extension's schema, public by default).
------------------------------------------------------------------------------
CREATE FUNCTION @extschema@.mesh_acquire(run_id text, agent_id text, actor_id text,
                                         parent_run_id text DEFAULT NULL,
                                         environment text DEFAULT NULL,
                                         project text DEFAULT NULL,
                                         from_snapshot bigint DEFAULT NULL)
RETURNS mesh.workspaces
    AS 'MODULE_PATHNAME', 'mesh_acquire' LANGUAGE C;

CREATE FUNCTION @extschema@.mesh_exec(run_id text, argv text[], dir text DEFAULT NULL,
                                      stdin bytea DEFAULT NULL, timeout interval DEFAULT NULL,
                                      env jsonb DEFAULT NULL)
RETURNS TABLE (exit_code integer, stdout text, stderr text, status text,
               truncated boolean, exec_id bigint,
               stdout_bytes bigint, stderr_bytes bigint)  -- stored whole: mesh_exec_output
    AS 'MODULE_PATHNAME', 'mesh_exec' LANGUAGE C ROWS 1;

CREATE FUNCTION @extschema@.mesh_read_file(run_id text, path text)
RETURNS bytea
    AS 'MODULE_PATHNAME', 'mesh_read_file' LANGUAGE C;

CREATE FUNCTION @extschema@.mesh_write_file(run_id text, path text, content bytea,
                                            mode integer DEFAULT 420)
RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_write_file' LANGUAGE C;

CREATE FUNCTION @extschema@.mesh_release(run_id text, reason text DEFAULT NULL)
RETURNS text
    AS 'MODULE_PATHNAME', 'mesh_release' LANGUAGE C;

-- Capture the run's /workspace as its project's new current snapshot.
CREATE FUNCTION @extschema@.mesh_snapshot(run_id text)
RETURNS mesh.snapshots
    AS 'MODULE_PATHNAME', 'mesh_snapshot' LANGUAGE C;

-- The shares of the snapshots the current role owns (every share, for
-- admins): the only way the harness writes them, so the view's condition,
-- checked on every row it inserts, is the ownership check.
CREATE VIEW mesh.snapshot_shares_owned AS
SELECT sh.snapshot_id, sh.role_oid, sh.shared_at
  FROM mesh.snapshot_shares sh
 WHERE mesh.may_drive((SELECT s.owner_role FROM mesh.snapshots s WHERE s.id = sh.snapshot_id),
                      (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user))
WITH CHECK OPTION;

-- The snapshot the current role owns (or, as an admin, any), or the refusal:
-- one it may only use was shared with it; any other does not exist to it.
-- Invoker's rights: it reads what the role may see.
CREATE FUNCTION mesh.snapshot_owned(p_id bigint, fn text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    owner regrole;
BEGIN
    IF p_id IS NULL THEN
        RAISE EXCEPTION '%: snapshot_id must not be NULL', fn
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass a value for snapshot_id.';
    END IF;
    SELECT p.owner_role INTO owner FROM mesh.project_snapshots p WHERE p.snapshot_id = p_id;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_snapshot(p_id);
    ELSIF NOT mesh.may_drive(owner, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION 'snapshot % was shared with this role; only its owner or an admin shares it further', p_id
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Ask its owner, or capture the project''s state of this role''s own with mesh_snapshot(run_id).';
    END IF;
END
$$;

-- The owner (or an admin) lets role and its members start runs from the
-- snapshot, by id (from_snapshot) and as their project's current one when
-- they have none of their own.
CREATE FUNCTION @extschema@.mesh_snapshot_share(snapshot_id bigint, role regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('mesh_snapshot_share', ARRAY['snapshot_id', 'role'],
                              ARRAY[snapshot_id IS NULL, role IS NULL]);
    PERFORM mesh.snapshot_owned(snapshot_id, 'mesh_snapshot_share');
    INSERT INTO mesh.snapshot_shares_owned (snapshot_id, role_oid)
    VALUES (mesh_snapshot_share.snapshot_id, mesh_snapshot_share.role) ON CONFLICT DO NOTHING;
END
$$;

-- The share ends: runs of role not yet materialized from the snapshot are
-- refused, and its project lookups no longer find it.
CREATE FUNCTION @extschema@.mesh_snapshot_unshare(snapshot_id bigint, role regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('mesh_snapshot_unshare', ARRAY['snapshot_id', 'role'],
                              ARRAY[snapshot_id IS NULL, role IS NULL]);
    PERFORM mesh.snapshot_owned(snapshot_id, 'mesh_snapshot_unshare');
    DELETE FROM mesh.snapshot_shares_owned sh
     WHERE sh.snapshot_id = mesh_snapshot_unshare.snapshot_id AND sh.role_oid = mesh_snapshot_unshare.role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'snapshot % is not shared with role %', snapshot_id, role
            USING ERRCODE = 'undefined_object', HINT = 'mesh.snapshot_shares_owned lists the shares of this role''s snapshots.';
    END IF;
END
$$;
------------------------------------------------------------------------------
-- Output stored whole: every exec's stdout and stderr as the command wrote
-- them (NUL and invalid UTF-8 included, granted secrets redacted), in chunks
-- keyed by their byte offset in the stream, up to mesh.exec_output_limit
-- bytes per stream (beyond it the tail is kept: the exec row's *_dropped say
-- how many leading bytes went).  Kept for mesh.exec_output_retention after
-- the exec ends; the reaper removes older output.
------------------------------------------------------------------------------
CREATE TABLE mesh.exec_output (
    exec_id      bigint NOT NULL REFERENCES mesh.execs (id),
    stream       text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    start_offset bigint NOT NULL CHECK (start_offset >= 0),
    data         bytea COMPRESSION lz4 NOT NULL,  -- pglz costs seconds per 64 MB, lz4 a fraction
    PRIMARY KEY (exec_id, stream, start_offset)
);
-- the execs whose output the reaper may have to expire
CREATE INDEX execs_output_kept_idx ON mesh.execs (finished_at)
    WHERE stdout_dropped < stdout_bytes OR stderr_dropped < stderr_bytes OR stdout <> '' OR stderr <> '';
-- the output of the execs pg_dump keeps (01_catalog.sql)
SELECT pg_catalog.pg_extension_config_dump('mesh.exec_output',
    $$WHERE exec_id IN (SELECT e.id FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
                         WHERE w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL))$$);

-- Bytes as text a person (and a text column) can hold: NUL and invalid UTF-8 become U+FFFD.
CREATE FUNCTION mesh.output_text(data bytea) RETURNS text
    AS 'MODULE_PATHNAME', 'mesh_output_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The worker stores an exec's output (what the backend kept, already redacted) a chunk at a
-- time (1 MB, src/exec_output.c), so it never holds a second copy of a whole stream, then
-- the byte counts on the exec's row, in the same transaction.
CREATE FUNCTION mesh.exec_output_chunk(p_exec_id bigint, p_stream text, p_start_offset bigint,
                                       p_data bytea)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    INSERT INTO mesh.exec_output (exec_id, stream, start_offset, data)
    VALUES (p_exec_id, p_stream, p_start_offset, p_data);
$$;
-- How many more bytes of output exec p_exec_id may store: what is left of its run's
-- quota (p_run_quota, counted in mesh.workspaces.output_bytes) and of the install's
-- (p_total_quota, against what mesh.exec_output takes on disk, dead rows and indexes
-- included), with the bound that leaves the least; nothing once its storing stopped.
-- The worker adds the data directory's free-space reserve (src/exec_output.c).
CREATE FUNCTION mesh.exec_output_allowance(p_exec_id bigint, p_run_quota bigint, p_total_quota bigint,
                                           OUT allowed bigint, OUT reason text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    run_left bigint;
    total_left bigint;
    stopped text;
BEGIN
    SELECT p_run_quota - w.output_bytes, e.output_stopped INTO run_left, stopped
      FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id WHERE e.id = p_exec_id;
    IF stopped IS NOT NULL THEN
        allowed := 0;
        reason := stopped;
        RETURN;
    END IF;
    total_left := p_total_quota - pg_catalog.pg_total_relation_size('mesh.exec_output'::regclass);
    IF total_left < run_left THEN
        allowed := greatest(total_left, 0);
        reason := 'install quota';
    ELSE
        allowed := greatest(run_left, 0);
        reason := 'run quota';
    END IF;
END;
$$;

-- What storing an exec's output took from its run's quota (p_stored bytes), and, when
-- storing stopped short (p_stopped: why; p_unstored: the bytes not stored), the exec's
-- marker and, the first time, an output_truncated event.  Returns whether the marker is new.
CREATE FUNCTION mesh.exec_output_account(p_exec_id bigint, p_stored bigint, p_stopped text,
                                         p_unstored bigint)
RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.execs;
    was text;
BEGIN
    IF p_stored > 0 THEN
        UPDATE mesh.workspaces w SET output_bytes = w.output_bytes + p_stored
          FROM mesh.execs x WHERE x.id = p_exec_id AND w.id = x.workspace_id;
    END IF;
    IF p_stopped IS NULL THEN
        RETURN false;
    END IF;
    SELECT x.output_stopped INTO was FROM mesh.execs x WHERE x.id = p_exec_id FOR UPDATE;
    UPDATE mesh.execs x SET output_stopped = coalesce(x.output_stopped, p_stopped),
                            output_unstored = x.output_unstored + coalesce(p_unstored, 0)
     WHERE x.id = p_exec_id RETURNING x.* INTO e;
    IF was IS NOT NULL THEN
        RETURN false;
    END IF;
    INSERT INTO mesh.events (kind, run_id, workspace_id, detail)
    VALUES ('output_truncated', e.run_id, e.workspace_id,
            jsonb_build_object('exec_id', e.id, 'reason', p_stopped, 'unstored_bytes', p_unstored));
    RETURN true;
END;
$$;

-- A command's output stored (src/exec_output.c): each stream's length and leading bytes not
-- kept on the exec's row, with what it took from the run's quota and why it stopped short,
-- in the transaction that stored the chunks.  Returns whether the stop is new.
CREATE FUNCTION mesh.exec_output_counts(p_exec_id bigint, p_stdout_bytes bigint, p_stdout_dropped bigint,
                                        p_stderr_bytes bigint, p_stderr_dropped bigint,
                                        p_stored bigint, p_stopped text, p_unstored bigint)
RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.execs
       SET stdout_bytes = p_stdout_bytes, stdout_dropped = p_stdout_dropped,
           stderr_bytes = p_stderr_bytes, stderr_dropped = p_stderr_dropped
     WHERE id = p_exec_id;
    SELECT mesh.exec_output_account(p_exec_id, p_stored, p_stopped, p_unstored);
$$;

-- A background command's progress: each stream's length as stored (NULL: unchanged, as once
-- its storing stopped) and how far the worker has read it from the backend, in the
-- transaction that stored the new chunks, which are only ever appended: past
-- mesh.exec_output_limit or a quota the stream stops growing (src/store_background.c), so
-- a flood rewrites nothing.  Returns whether the stop is new.
CREATE FUNCTION mesh.exec_output_progress(p_exec_id bigint, p_stdout_bytes bigint, p_stderr_bytes bigint,
                                          p_stdout_read bigint, p_stderr_read bigint,
                                          p_stored bigint, p_stopped text, p_unstored bigint)
RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.execs e
       SET stdout_bytes = coalesce(p_stdout_bytes, e.stdout_bytes),
           stderr_bytes = coalesce(p_stderr_bytes, e.stderr_bytes),
           stdout_read = p_stdout_read, stderr_read = p_stderr_read
     WHERE e.id = p_exec_id;
    SELECT mesh.exec_output_account(p_exec_id, p_stored, p_stopped, p_unstored);
$$;

-- What people see of a stored stream (mesh_exec's clamp, for a background command's end): all
-- of it within p_max bytes, else its first and last kept bytes around the marker
-- "…[mesh: N bytes omitted]…" (src/exec_output.c builds the same for a command's own answer).
CREATE FUNCTION mesh.exec_output_clamped(p_exec_id bigint, p_stream text, p_max integer,
                                         OUT clamped text, OUT truncated boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.execs;
    total bigint;
    first bigint;
    head bigint;
    tail bigint;
    kept bigint;
BEGIN
    SELECT * INTO e FROM mesh.execs WHERE id = p_exec_id;
    total := CASE p_stream WHEN 'stdout' THEN e.stdout_bytes ELSE e.stderr_bytes END;
    first := CASE p_stream WHEN 'stdout' THEN e.stdout_dropped ELSE e.stderr_dropped END;
    kept := total - first;
    IF total <= p_max AND first = 0 THEN
        clamped := mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, 0, total));
        truncated := false;
        RETURN;
    END IF;
    head := least(p_max / 2, kept);
    tail := least(p_max - head, kept - head);
    clamped := mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, first, first + head))
               || E'\n\u2026[mesh: ' || (total - head - tail) || E' bytes omitted]\u2026\n'
               || mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, total - tail, total));
    truncated := true;
END;
$$;

-- The stored bytes [p_from, p_upto) of one stream.
CREATE FUNCTION mesh.exec_output_range(p_exec_id bigint, p_stream text, p_from bigint, p_upto bigint)
RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT coalesce(string_agg(substring(o.data FROM (greatest(p_from - o.start_offset, 0) + 1)::integer
                                         FOR (least(p_upto, o.start_offset + length(o.data))
                                              - greatest(p_from, o.start_offset))::integer),
                               '' ORDER BY o.start_offset), '')
      FROM mesh.exec_output o
     WHERE o.exec_id = p_exec_id AND o.stream = p_stream
       AND o.start_offset < p_upto AND o.start_offset + length(o.data) > p_from;
$$;

-- The reaper: output of execs that ended over p_minutes ago goes, with the clamped copies
-- on their rows, p_batch execs per call (src/reaper.c calls it until a batch comes back
-- short, each call its own transaction).  The only deletion mesh_worker may cause, hence a
-- definer's function, not a DELETE grant.
CREATE FUNCTION mesh.exec_output_expire(p_minutes integer, p_batch integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    WITH old AS (
        SELECT id FROM mesh.execs
         WHERE (stdout_dropped < stdout_bytes OR stderr_dropped < stderr_bytes OR stdout <> '' OR stderr <> '')
           AND finished_at < now() - make_interval(mins => p_minutes)
         ORDER BY finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED),
    gone AS (DELETE FROM mesh.exec_output o USING old WHERE o.exec_id = old.id),
    marked AS (UPDATE mesh.execs e SET stdout_dropped = e.stdout_bytes, stderr_dropped = e.stderr_bytes,
                                       stdout = NULL, stderr = NULL
                 FROM old WHERE e.id = old.id RETURNING 1)
    SELECT count(*) FROM marked
$$;

-- The stored chunks of the execs the current role may read.
CREATE VIEW mesh.exec_output_chunks AS
SELECT o.exec_id, o.stream, o.start_offset, o.data
  FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id
       JOIN mesh.workspaces w ON w.id = e.workspace_id
 WHERE mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

-- An exec the current role may read, or the one error for "none" and "not yours".
CREATE FUNCTION mesh.readable_exec(p_exec_id bigint) RETURNS mesh.exec_log
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
BEGIN
    PERFORM mesh.require_args('readable_exec', ARRAY['exec_id'], ARRAY[p_exec_id IS NULL]);
    SELECT l.* INTO e FROM mesh.exec_log l WHERE l.exec_id = p_exec_id;
    IF e.exec_id IS NULL THEN
        RAISE EXCEPTION 'exec % does not exist', coalesce(p_exec_id::text, 'NULL')
            USING ERRCODE = 'undefined_object',
                  HINT = 'Exec ids are those mesh_exec returns and mesh.exec_log lists for runs this role may drive.';
    END IF;
    RETURN e;
END;
$$;

/*
 * Up to p_max bytes of one stream from byte offset p_from (an offset inside
 * the dropped head reads from the first kept byte).  p_whole_chars: do not
 * end inside a UTF-8 sequence the limit cut (the rest comes next time).
 */
CREATE FUNCTION mesh.output_slice(e mesh.exec_log, p_stream text, p_from bigint, p_max bigint,
                                  p_whole_chars boolean, OUT data bytea, OUT next bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    total bigint := CASE p_stream WHEN 'stdout' THEN e.stdout_bytes ELSE e.stderr_bytes END;
    dropped bigint := CASE p_stream WHEN 'stdout' THEN e.stdout_dropped ELSE e.stderr_dropped END;
    first bigint;
    upto bigint;
    b integer;
    seq integer;
BEGIN
    IF p_from < 0 OR p_from > total THEN
        RAISE EXCEPTION 'offset % is outside % of exec % (0 to % bytes)',
                        coalesce(p_from::text, 'NULL'), p_stream, e.exec_id, total
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass 0, or the *_next offset the previous call returned.';
    END IF;
    IF p_max <= 0 THEN
        RAISE EXCEPTION 'max_bytes must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    first := greatest(p_from, dropped);
    upto := least(total, first + p_max);
    SELECT coalesce(string_agg(substring(o.data FROM (greatest(first - o.start_offset, 0) + 1)::integer
                                         FOR (upto - greatest(first, o.start_offset))::integer),
                               '' ORDER BY o.start_offset), '')
      INTO data
      FROM mesh.exec_output_chunks o
     WHERE o.exec_id = e.exec_id AND o.stream = p_stream
       AND o.start_offset < upto AND o.start_offset + length(o.data) > first;
    IF p_whole_chars AND upto < total THEN
        -- back off a UTF-8 sequence the limit cut; its lead byte is among the last three
        FOR k IN 1 .. least(3, length(data)) LOOP
            b := get_byte(data, length(data) - k);
            EXIT WHEN b < 128;
            CONTINUE WHEN b < 192;
            seq := CASE WHEN b >= 240 THEN 4 WHEN b >= 224 THEN 3 ELSE 2 END;
            IF k < seq THEN
                data := substring(data FOR length(data) - k);
            END IF;
            EXIT;
        END LOOP;
    END IF;
    next := first + length(data);
END;
$$;

-- Each stream of each readable exec as text, for people.
CREATE VIEW mesh.exec_output_text AS
SELECT l.exec_id, l.run_id, s.stream, s.bytes, s.dropped,
       (SELECT mesh.output_text(coalesce(string_agg(o.data, '' ORDER BY o.start_offset), ''))
          FROM mesh.exec_output_chunks o WHERE o.exec_id = l.exec_id AND o.stream = s.stream) AS output
  FROM mesh.exec_log l
       CROSS JOIN LATERAL (VALUES ('stdout', l.stdout_bytes, l.stdout_dropped),
                                  ('stderr', l.stderr_bytes, l.stderr_dropped)) s (stream, bytes, dropped);

CREATE FUNCTION @extschema@.mesh_exec_output(exec_id bigint, stdout_from bigint DEFAULT 0,
                                             stderr_from bigint DEFAULT 0,
                                             max_bytes bigint DEFAULT 16777216)
RETURNS TABLE (status text, exit_code integer, stdout text, stderr text,
               stdout_next bigint, stderr_next bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
    o record;
    r record;
BEGIN
    PERFORM mesh.require_args('mesh_exec_output', ARRAY['exec_id', 'stdout_from', 'stderr_from', 'max_bytes'],
        ARRAY[exec_id IS NULL, stdout_from IS NULL, stderr_from IS NULL, max_bytes IS NULL]);
    e := mesh.readable_exec(exec_id);
    o := mesh.output_slice(e, 'stdout', stdout_from, max_bytes, true);
    r := mesh.output_slice(e, 'stderr', stderr_from, max_bytes, true);
    RETURN QUERY SELECT e.status::text, e.exit_code, mesh.output_text(o.data),
                        mesh.output_text(r.data), o.next, r.next;
END;
$$;

-- The stored bytes of one stream as they came, for output that is not text.
CREATE FUNCTION @extschema@.mesh_exec_output_bytes(exec_id bigint, stream text DEFAULT 'stdout',
                                                   from_offset bigint DEFAULT 0,
                                                   max_bytes bigint DEFAULT 16777216)
RETURNS TABLE (data bytea, next_offset bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
    s record;
BEGIN
    PERFORM mesh.require_args('mesh_exec_output_bytes', ARRAY['exec_id', 'stream', 'from_offset', 'max_bytes'],
        ARRAY[exec_id IS NULL, stream IS NULL, from_offset IS NULL, max_bytes IS NULL]);
    IF stream NOT IN ('stdout', 'stderr') THEN
        RAISE EXCEPTION 'stream must be % or %, not %', 'stdout', 'stderr', stream
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    e := mesh.readable_exec(exec_id);
    s := mesh.output_slice(e, stream, from_offset, max_bytes, false);
    RETURN QUERY SELECT s.data, s.next;
END;
$$;
------------------------------------------------------------------------------
-- Background commands: started, followed by a worker while they run (their
-- output stored as it comes, a NOTIFY on mesh_exec_<id> for each step),
-- waited for, signalled.
------------------------------------------------------------------------------
CREATE FUNCTION @extschema@.mesh_exec_start(run_id text, argv text[], dir text DEFAULT NULL,
                                            stdin bytea DEFAULT NULL, timeout interval DEFAULT NULL,
                                            env jsonb DEFAULT NULL)
RETURNS bigint
    AS 'MODULE_PATHNAME', 'mesh_exec_start' LANGUAGE C;

-- The row mesh_exec returns, once the command has ended; with a timeout that passes first, the
-- row as it is (status running).
CREATE FUNCTION @extschema@.mesh_exec_wait(exec_id bigint, timeout interval DEFAULT NULL)
RETURNS TABLE (exit_code integer, stdout text, stderr text, status text,
               truncated boolean, exec_id bigint,
               stdout_bytes bigint, stderr_bytes bigint)
    AS 'MODULE_PATHNAME', 'mesh_exec_wait' LANGUAGE C ROWS 1;

-- Signal a running command's whole process tree; false (with a notice) when it already ended.
CREATE FUNCTION @extschema@.mesh_exec_kill(exec_id bigint, signal text DEFAULT 'TERM')
RETURNS boolean
    AS 'MODULE_PATHNAME', 'mesh_exec_kill' LANGUAGE C;

-- The channel to LISTEN on for a command's progress and end: a name only the
-- roles that may read the exec learn (another role's exec does not exist).
CREATE FUNCTION @extschema@.mesh_exec_channel(exec_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF exec_id IS NULL THEN
        RAISE EXCEPTION 'mesh_exec_channel: exec_id must not be NULL'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass the id mesh_exec_start returned.';
    END IF;
    RETURN (mesh.readable_exec(exec_id)).channel;
END
$$;
------------------------------------------------------------------------------
-- Retention: history is bounded by default.  Finished execs (with their stored
-- output), events and released workspaces older than mesh.exec_retention,
-- mesh.event_retention and mesh.workspace_retention (14 days each; 0 keeps
-- them) are deleted by the reaper each sweep, through mesh.history_expire, in
-- batches of their own transactions (src/reaper.c).  What an operator still
-- needs of them, the spend, is folded first into mesh.usage_daily, which
-- mesh.spend_by_agent adds to the rows still kept.  Nothing of a live
-- workspace (pending, acquiring, ready, releasing) nor a running exec goes.
------------------------------------------------------------------------------
-- What expired rows used, per day (UTC), agent and backend ('' for runs that never
-- got one): the runs' counts and compute seconds come in when their workspace rows go,
-- the execs' when theirs go.
CREATE TABLE mesh.usage_daily (
    day                    date NOT NULL,
    agent_id               text NOT NULL,
    backend                text NOT NULL,
    runs                   bigint NOT NULL DEFAULT 0,              -- workspace rows (by the day they were created)
    runs_stopped_by_budget bigint NOT NULL DEFAULT 0,
    compute_seconds        double precision NOT NULL DEFAULT 0,    -- the runs' budget charges
    execs                  bigint NOT NULL DEFAULT 0,              -- exec rows (by the day they started)
    cpu_seconds            double precision NOT NULL DEFAULT 0,
    wall_seconds           double precision NOT NULL DEFAULT 0,
    cpu_charged_seconds    double precision NOT NULL DEFAULT 0,
    wall_charged_seconds   double precision NOT NULL DEFAULT 0,
    output_bytes           bigint NOT NULL DEFAULT 0,              -- stdout and stderr, as the commands wrote them
    PRIMARY KEY (day, agent_id, backend)
);
SELECT pg_catalog.pg_extension_config_dump('mesh.usage_daily', '');

-- the oldest of each kind first, by index
CREATE INDEX execs_finished_idx ON mesh.execs (finished_at);
CREATE INDEX events_at_idx ON mesh.events (at);
CREATE INDEX workspaces_settled_idx ON mesh.workspaces ((coalesce(released_at, created_at)))
    WHERE status IN ('released', 'failed');

-- A retention setting's value (as SHOW gives it: '14d', '90min', 0 to keep) as an interval,
-- NULL for keep.
CREATE FUNCTION mesh.retention_interval(p_value text) RETURNS interval
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT nullif(p_value::interval, interval '0')
$$;

/*
 * One batch of expiry: at most p_batch rows of each kind go, the oldest first,
 * and how many of each is returned (the reaper calls it again, in a new
 * transaction, while any kind filled its batch).  A NULL retention reads its
 * setting; 0 keeps that kind.
 *   execs:      finished execs of released or failed runs that ended over
 *               p_exec_retention ago, with their output, after their sums went
 *               into mesh.usage_daily;
 *   outputs:    once no more execs are due, stored output of the execs left
 *               that ended over p_output_retention ago (mesh.exec_output_expire;
 *               the rows stay);
 *   events:     events older than p_event_retention, except a live workspace's;
 *   workspaces: once no more execs are due, released or failed workspaces
 *               released (or created, if never) over p_workspace_retention
 *               ago (and over p_exec_retention, so their execs are gone), that
 *               no exec, live child run or unreleased sandbox still needs,
 *               with their run's grants, tokens and budget override, after
 *               their sums went into mesh.usage_daily.  The run's id may then
 *               be declared again.
 * The only deletion mesh_worker may cause, hence a definer's function.
 */
CREATE FUNCTION mesh.history_expire(p_exec_retention interval DEFAULT NULL,
                                    p_event_retention interval DEFAULT NULL,
                                    p_workspace_retention interval DEFAULT NULL,
                                    p_output_retention interval DEFAULT NULL,
                                    p_batch integer DEFAULT 5000,
                                    OUT outputs bigint, OUT execs bigint, OUT events bigint,
                                    OUT workspaces bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    exec_keep interval := CASE WHEN p_exec_retention IS NULL THEN mesh.retention_interval(current_setting('mesh.exec_retention'))
                               ELSE nullif(p_exec_retention, interval '0') END;
    event_keep interval := CASE WHEN p_event_retention IS NULL THEN mesh.retention_interval(current_setting('mesh.event_retention'))
                                ELSE nullif(p_event_retention, interval '0') END;
    ws_keep interval := CASE WHEN p_workspace_retention IS NULL THEN mesh.retention_interval(current_setting('mesh.workspace_retention'))
                             ELSE nullif(p_workspace_retention, interval '0') END;
    output_keep interval := CASE WHEN p_output_retention IS NULL THEN mesh.retention_interval(current_setting('mesh.exec_output_retention'))
                                 ELSE nullif(p_output_retention, interval '0') END;
    ids bigint[];
    runs text[];
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'p_batch must be at least 1, not %', coalesce(p_batch::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the most rows of each kind one call deletes.';
    END IF;
    IF least(exec_keep, event_keep, ws_keep, output_keep) < interval '0' THEN
        RAISE EXCEPTION 'a retention cannot be negative'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Pass an interval, or 0 to keep everything of that kind.';
    END IF;
    outputs := 0; execs := 0; events := 0; workspaces := 0;

    IF exec_keep IS NOT NULL THEN
        SELECT array_agg(o.id) INTO ids FROM (
            SELECT e.id FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
             WHERE e.finished_at < now() - exec_keep AND e.status <> 'running'
               AND w.status IN ('released', 'failed')
             ORDER BY e.finished_at LIMIT p_batch FOR UPDATE OF e SKIP LOCKED) o;
        IF ids IS NOT NULL THEN
            INSERT INTO mesh.usage_daily AS u (day, agent_id, backend, execs, cpu_seconds, wall_seconds,
                                               cpu_charged_seconds, wall_charged_seconds, output_bytes)
            SELECT (e.started_at AT TIME ZONE 'UTC')::date, w.agent_id, coalesce(w.backend_kind, ''), count(*),
                   coalesce(sum(e.cpu_seconds), 0), coalesce(sum(e.wall_seconds), 0),
                   coalesce(sum(e.charged_seconds) FILTER (WHERE e.charge_basis = 'cpu'), 0),
                   coalesce(sum(e.charged_seconds) FILTER (WHERE e.charge_basis = 'wall'), 0),
                   sum(e.stdout_bytes + e.stderr_bytes)
              FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
             WHERE e.id = ANY (ids)
             GROUP BY 1, 2, 3
            ON CONFLICT ON CONSTRAINT usage_daily_pkey DO UPDATE
               SET execs = u.execs + excluded.execs, cpu_seconds = u.cpu_seconds + excluded.cpu_seconds,
                   wall_seconds = u.wall_seconds + excluded.wall_seconds,
                   cpu_charged_seconds = u.cpu_charged_seconds + excluded.cpu_charged_seconds,
                   wall_charged_seconds = u.wall_charged_seconds + excluded.wall_charged_seconds,
                   output_bytes = u.output_bytes + excluded.output_bytes;
            DELETE FROM mesh.exec_output o WHERE o.exec_id = ANY (ids);
            DELETE FROM mesh.execs e WHERE e.id = ANY (ids);
            GET DIAGNOSTICS execs = ROW_COUNT;
        END IF;
    END IF;

    -- after the execs, and only once they are done: output of execs about to go needs no expiry
    IF output_keep IS NOT NULL AND execs < p_batch THEN
        outputs := mesh.exec_output_expire(greatest(ceil(extract(epoch FROM output_keep) / 60), 1)::integer, p_batch);
    END IF;

    IF event_keep IS NOT NULL THEN
        SELECT array_agg(o.id) INTO ids FROM (
            SELECT x.id FROM mesh.events x
             WHERE x.at < now() - event_keep
               AND NOT EXISTS (SELECT 1 FROM mesh.workspaces w
                                WHERE w.id = x.workspace_id AND w.status NOT IN ('released', 'failed'))
             ORDER BY x.at LIMIT p_batch) o;
        DELETE FROM mesh.events v WHERE v.id = ANY (ids);
        GET DIAGNOSTICS events = ROW_COUNT;
    END IF;

    -- once no more execs are due: a run's row can go only after its execs
    IF ws_keep IS NOT NULL AND execs < p_batch THEN
        SELECT array_agg(o.id), array_agg(o.run_id) INTO ids, runs FROM (
            SELECT w.id, w.run_id FROM mesh.workspaces w
             WHERE w.status IN ('released', 'failed')
               AND coalesce(w.released_at, w.created_at) < now() - greatest(ws_keep, coalesce(exec_keep, ws_keep))
               AND (w.external_ref IS NULL OR w.release_outcome IN ('destroyed', 'never materialized'))
               AND NOT EXISTS (SELECT 1 FROM mesh.execs e WHERE e.workspace_id = w.id)
               AND NOT EXISTS (SELECT 1 FROM mesh.workspaces c
                                WHERE c.parent_run_id = w.run_id AND c.status NOT IN ('released', 'failed'))
             ORDER BY coalesce(w.released_at, w.created_at) LIMIT p_batch FOR UPDATE SKIP LOCKED) o;
        IF ids IS NOT NULL THEN
            INSERT INTO mesh.usage_daily AS u (day, agent_id, backend, runs, runs_stopped_by_budget, compute_seconds)
            SELECT (w.created_at AT TIME ZONE 'UTC')::date, w.agent_id, coalesce(w.backend_kind, ''), count(*),
                   count(*) FILTER (WHERE w.status_reason_code = 'budget_exhausted'), sum(w.compute_seconds)
              FROM mesh.workspaces w
             WHERE w.id = ANY (ids)
             GROUP BY 1, 2, 3
            ON CONFLICT ON CONSTRAINT usage_daily_pkey DO UPDATE
               SET runs = u.runs + excluded.runs,
                   runs_stopped_by_budget = u.runs_stopped_by_budget + excluded.runs_stopped_by_budget,
                   compute_seconds = u.compute_seconds + excluded.compute_seconds;
            -- what was the run's alone: a run declared again under its id starts with none of it
            DELETE FROM mesh.grants g WHERE g.run_id = ANY (runs);
            DELETE FROM mesh.run_tokens t WHERE t.run_id = ANY (runs);
            DELETE FROM mesh.run_budgets b WHERE b.run_id = ANY (runs);
            DELETE FROM mesh.workspaces w WHERE w.id = ANY (ids);
            GET DIAGNOSTICS workspaces = ROW_COUNT;
        END IF;
    END IF;
END
$$;

-- Spend per agent: the workspace rows kept, and what expired ones left in mesh.usage_daily.
CREATE OR REPLACE VIEW mesh.spend_by_agent AS
SELECT s.agent_id, sum(s.runs)::bigint AS runs, sum(s.live_workspaces)::bigint AS live_workspaces,
       sum(s.compute_seconds) AS compute_seconds, sum(s.runs_stopped_by_budget)::bigint AS runs_stopped_by_budget
  FROM (SELECT w.agent_id, count(*) AS runs,
               count(*) FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS live_workspaces,
               sum(w.compute_seconds) AS compute_seconds,
               count(*) FILTER (WHERE w.status_reason_code = 'budget_exhausted') AS runs_stopped_by_budget
          FROM mesh.workspaces w GROUP BY w.agent_id
        UNION ALL
        SELECT u.agent_id, sum(u.runs)::bigint, 0, sum(u.compute_seconds), sum(u.runs_stopped_by_budget)::bigint
          FROM mesh.usage_daily u GROUP BY u.agent_id) s
 GROUP BY s.agent_id;

GRANT SELECT ON mesh.usage_daily TO mesh_admin;
REVOKE ALL ON FUNCTION mesh.history_expire(interval, interval, interval, interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.history_expire(interval, interval, interval, interval, integer) TO mesh_worker, mesh_admin;
------------------------------------------------------------------------------
-- Statistics a monitoring stack scrapes, named and reset after PostgreSQL's
-- pg_stat_* views (times in milliseconds, counters since stats_reset):
-- calls per backend and operation and each worker's load from shared memory
-- (src/stats.c), each agent's use from the tables.  Read by mesh_admin and
-- pg_monitor; reset by mesh_admin (mesh.stat_reset()).
-- deploy/prometheus/mesh_exec_queries.yaml exports them.
------------------------------------------------------------------------------

-- Per backend (NULL: calls that reached none -- declarations, sweeps, calls
-- refused or abandoned before a worker answered) and operation: calls, the
-- calls that raised an error, total and mean time, and latency percentiles
-- read from a log-bucket histogram (at worst a quarter off the exact value).
CREATE FUNCTION mesh.stat_get_backends()
RETURNS TABLE (backend text, operation text, calls bigint, errors bigint,
               total_time double precision, mean_time double precision,
               p50_time double precision, p95_time double precision, p99_time double precision,
               stats_reset timestamptz)
    AS 'MODULE_PATHNAME', 'mesh_stat_backends' LANGUAGE C VOLATILE;

-- The same calls' latency histogram as Prometheus reads one (postgres_exporter's HISTOGRAM):
-- upper bounds in seconds, one per doubling from 8 us, the calls below each (cumulative), their
-- total time in seconds and their number, so that percentiles can be computed over any window.
CREATE FUNCTION mesh.stat_get_backend_latency()
RETURNS TABLE (backend text, operation text, le double precision[], calls_below bigint[],
               sum_seconds double precision, calls bigint)
    AS 'MODULE_PATHNAME', 'mesh_stat_backend_latency' LANGUAGE C VOLATILE;

-- Per worker: its pid (NULL while not running), calls waiting in its queue and
-- in progress, its busy time (awake in its loop), calls it ended, when it last
-- took or ended one.
CREATE FUNCTION mesh.stat_get_workers()
RETURNS TABLE (worker integer, pid integer, queue_depth integer, calls_in_flight integer,
               busy_time double precision, calls bigint, last_activity timestamptz,
               stats_reset timestamptz)
    AS 'MODULE_PATHNAME', 'mesh_stat_workers' LANGUAGE C VOLATILE;

-- Zero the counters of mesh.stat_backends and mesh.stat_workers, as pg_stat_reset().
CREATE FUNCTION mesh.stat_reset() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_stat_reset' LANGUAGE C VOLATILE;

CREATE VIEW mesh.stat_backends AS
SELECT backend, operation, calls, errors, total_time, mean_time, p50_time, p95_time, p99_time,
       stats_reset
  FROM mesh.stat_get_backends();

CREATE VIEW mesh.stat_backend_latency AS
SELECT backend, operation, le, calls_below, sum_seconds, calls
  FROM mesh.stat_get_backend_latency();

CREATE VIEW mesh.stat_workers AS
SELECT worker, pid, queue_depth, calls_in_flight, busy_time, calls, last_activity, stats_reset
  FROM mesh.stat_get_workers();

-- Per agent, from the tables: its runs, those live now, their commands, the CPU
-- seconds those used, the compute charged against budgets, the largest share of
-- its budget a live run has used, and the runs its budget stopped.  One pass over
-- each table (hashed, not a probe per run: about twice as fast at 200,000 commands),
-- so its cost grows with the history kept; the exporter caches it.
CREATE VIEW mesh.stat_agents AS
SELECT w.agent_id,
       count(*) AS runs,
       count(*) FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS live_workspaces,
       coalesce(sum(x.execs), 0)::bigint AS execs,
       coalesce(sum(x.running_execs), 0)::bigint AS running_execs,
       coalesce(sum(x.cpu_seconds), 0) AS cpu_seconds,
       sum(w.compute_seconds) AS compute_seconds,
       max(w.compute_seconds / coalesce(rb.max_compute_seconds, a.max_compute_seconds, s.max_compute_seconds))
           FILTER (WHERE w.status IN ('acquiring', 'ready', 'releasing')) AS max_budget_used,
       count(*) FILTER (WHERE w.status_reason_code = 'budget_exhausted') AS runs_stopped_by_budget
  FROM mesh.workspaces w
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = w.agent_id
  LEFT JOIN mesh.run_budgets rb ON rb.run_id = w.run_id
  LEFT JOIN (SELECT e.workspace_id, count(*) AS execs,
                    count(*) FILTER (WHERE e.status = 'running') AS running_execs,
                    sum(e.cpu_seconds) AS cpu_seconds
               FROM mesh.execs e GROUP BY e.workspace_id) x ON x.workspace_id = w.id
 GROUP BY w.agent_id;

REVOKE ALL ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers(),
                       mesh.stat_reset() FROM PUBLIC;
REVOKE ALL ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents FROM PUBLIC;
-- (pg_monitor's USAGE on the schema is granted with the others', sql/src/90_privileges.sql)
GRANT EXECUTE ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers()
      TO mesh_admin, pg_monitor;
GRANT SELECT ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents
      TO mesh_admin, pg_monitor;
GRANT EXECUTE ON FUNCTION mesh.stat_reset() TO mesh_admin;
------------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing; the harness calls the API and reads views;
-- the admin configures.  Credentials are readable by neither.
------------------------------------------------------------------------------
REVOKE ALL ON ALL TABLES IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_acquire(text, text, text, text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_read_file(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_write_file(text, text, bytea, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_release(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_output(bigint, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_output_bytes(bigint, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_start(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_wait(bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_kill(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_channel(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot_share(bigint, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot_unshare(bigint, regrole) FROM PUBLIC;

GRANT USAGE ON SCHEMA mesh TO mesh_harness, mesh_admin, mesh_worker;
-- a monitoring role reads the statistics views (sql/src/21_stats.sql), nothing else
GRANT USAGE ON SCHEMA mesh TO pg_monitor;
-- the workers read and write mesh's rows (no DELETE, no DDL), call its functions
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA mesh TO mesh_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mesh TO mesh_worker;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mesh TO mesh_worker;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_acquire(text, text, text, text, text, text, bigint) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec(text, text[], text, bytea, interval, jsonb) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_read_file(text, text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_write_file(text, text, bytea, integer) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_release(text, text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_snapshot(text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_start(text, text[], text, bytea, interval, jsonb),
                          @extschema@.mesh_exec_wait(bigint, interval),
                          @extschema@.mesh_exec_kill(bigint, text)
      TO mesh_harness, mesh_admin;
-- stored output: read through views that show only the runs the role may drive
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_output(bigint, bigint, bigint, bigint),
                          @extschema@.mesh_exec_output_bytes(bigint, text, bigint, bigint),
                          mesh.readable_exec(bigint),
                          mesh.output_slice(mesh.exec_log, text, bigint, bigint, boolean),
                          mesh.output_text(bytea)
      TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.exec_output_chunks, mesh.exec_output_text TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.live_workspaces, mesh.run_workspaces, mesh.exec_log, mesh.spend_by_run TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.may_drive(regrole, oid) TO mesh_harness, mesh_admin;
-- the one NULL check, which the harness's own functions call as their caller
GRANT EXECUTE ON FUNCTION mesh.require_args(text, text[], boolean[]) TO mesh_harness, mesh_admin;
-- run ownership beyond runs: progress channels, snapshots and their shares
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_channel(bigint),
                          mesh.exec_channel_name(bigint, text),
                          @extschema@.mesh_snapshot_share(bigint, regrole),
                          @extschema@.mesh_snapshot_unshare(bigint, regrole),
                          mesh.snapshot_owned(bigint, text),
                          mesh.snapshot_usable(bigint, regrole, oid),
                          mesh.raise_unknown_snapshot(bigint)
      TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.project_snapshots TO mesh_harness;
GRANT SELECT, INSERT, DELETE ON mesh.snapshot_shares_owned TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.agent_access TO mesh_admin;
GRANT SELECT ON mesh.spend_by_agent, mesh.run_limits, mesh.settings, mesh.run_budgets, mesh.tier_climbs TO mesh_admin;
GRANT SELECT ON mesh.secret_catalog, mesh.environments, mesh.grants TO mesh_admin;
GRANT SELECT ON mesh.backend_catalog, mesh.event_log TO mesh_admin;
GRANT SELECT ON mesh.backends, mesh.agents, mesh.workspaces, mesh.execs, mesh.events TO mesh_admin;
GRANT SELECT ON mesh.snapshots, mesh.project_snapshots TO mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.backend_add(text, text, jsonb, boolean, integer, mesh.size_tier),
                          mesh.backend_configure(text, jsonb),
                          mesh.backend_enable(text),
                          mesh.backend_disable(text),
                          mesh.backend_set_credential(text, text),
                          mesh.backend_set_order(text, integer),
                          mesh.backend_set_max_size(text, mesh.size_tier),
                          mesh.agent_set(text, text, mesh.size_tier),
                          mesh.agent_set_budget(text, double precision, integer, interval),
                          mesh.run_set_budget(text, double precision, interval),
                          mesh.set_policy(interval, interval, double precision, boolean, integer, integer),
                          mesh.drivers(),
                          mesh.sweep(),
                          mesh.call_stages(),
                          mesh.call_stages_reset(),
                          mesh.secret_set(text, text, text),
                          mesh.secret_delete(text, text),
                          mesh.environment_set(text, jsonb),
                          mesh.grant_revoke(text, text, text, text),
                          mesh.run_grants(text),
                          mesh.egress_policy(),
                          mesh.set_egress_policy(jsonb),
                          mesh.run_network(text),
                          mesh.snapshot_retire(bigint),
                          mesh.agent_grant(text, regrole),
                          mesh.agent_revoke(text, regrole)
      TO mesh_admin;
------------------------------------------------------------------------------
-- The embedded default: the daemon the extension supervises, as "local".
------------------------------------------------------------------------------
INSERT INTO mesh.backends (name, driver, enabled, catalog_order, config, max_size)
SELECT 'local', 'sandboxd', true, 0, '{"embedded": true}', 'xlarge'
 WHERE coalesce(current_setting('mesh.embedded_sandboxd', true), 'on') = 'on';
