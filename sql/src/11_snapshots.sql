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
