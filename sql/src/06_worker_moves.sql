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
