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

-- The harness's call: keep run_id's workspace by more ("by").  A live one
-- (ready) has its run's lifetime bound (mesh.settings.max_run_lifetime from its
-- creation) moved, and its run token's expiry with it; a hibernated one its
-- retention deadline (the warning due again before it).  Recorded (event
-- 'extended').  Returns the new deadline.
CREATE FUNCTION @extschema@.mesh_extend(run_id text, by interval) RETURNS timestamptz
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

-- The admin's call: how long hibernated workspaces are kept, and how long
-- before their deadline the warning goes out.  NULL leaves one as it is.
CREATE FUNCTION mesh.set_lifecycle(hibernated_retention interval DEFAULT NULL, expiry_warning interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    UPDATE mesh.settings s SET hibernated_retention = coalesce(set_lifecycle.hibernated_retention, s.hibernated_retention),
                               expiry_warning = coalesce(set_lifecycle.expiry_warning, s.expiry_warning);
END
$$;
