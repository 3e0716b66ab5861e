------------------------------------------------------------------------------
-- Resumable conversations.  A run may continue another run of the same
-- conversation (mesh_resume): when the earlier run's workspace was released
-- by hibernation on a backend that declares it, the new run takes that
-- workspace over (its files: the cloned repository, branches, build
-- outputs) and its first call wakes it, instead of creating a fresh one.
-- Ownership moves in one transaction (mesh.workspace_resume): the earlier
-- row ends, released with outcome 'hibernated' and resumed_by naming the new
-- run, so no cleanup of it touches the sandbox and never do two live rows
-- name it.  Anything else falls back to a fresh workspace, and the NOTICE
-- says exactly why.
------------------------------------------------------------------------------

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
           resume_of = p_resume_of, status_reason_code = old.status_reason_code,
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
