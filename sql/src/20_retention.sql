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
