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
