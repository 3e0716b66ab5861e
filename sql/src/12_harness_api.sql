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
