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
    set_at              timestamptz NOT NULL DEFAULT now(),
    -- mesh_extend of a live workspace: added to mesh.settings.max_run_lifetime for this run
    lifetime_extension  interval NOT NULL DEFAULT '0' CHECK (lifetime_extension >= '0')
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
