------------------------------------------------------------------------------
-- Views for operators and harnesses (no credential, no env values).
------------------------------------------------------------------------------
CREATE VIEW mesh.backend_catalog AS
SELECT b.name, b.driver, b.enabled, b.catalog_order, b.config, b.max_size,
       (c.backend IS NOT NULL) AS has_credential, c.set_at AS credential_set_at,
       b.created_at, b.updated_at,
       -- declared, not discovered: what a run on it may ask (shell, eval, snapshot, ...)
       mesh.driver_capabilities(b.driver, b.config) AS capabilities
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
