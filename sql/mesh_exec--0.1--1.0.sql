/* mesh_exec--0.1--1.0.sql: upgrade an installed mesh_exec 0.1 to 1.0 (ALTER EXTENSION mesh_exec UPDATE) */

\echo Use "ALTER EXTENSION mesh_exec UPDATE TO '1.0'" to load this file. \quit

-- Every change below keeps what 0.1 had and makes the catalog equal to a fresh 1.0 install
-- (test/e2e/upgrade.t compares the two).

------------------------------------------------------------------------------
-- Egress: a policy always names its mode.  0.1 read a saved row without one as
-- the allowlist (a branch for rows of versions never released); the rows such a
-- hand-written policy left are given that mode here, so nothing widens or breaks.
------------------------------------------------------------------------------
UPDATE mesh.egress_settings SET policy = policy || '{"mode": "allowlist"}'
 WHERE jsonb_typeof(policy) = 'object' AND NOT policy ? 'mode';
DROP FUNCTION mesh.egress_policy_parse(jsonb, boolean);

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
REVOKE ALL ON FUNCTION mesh.egress_policy_parse(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.egress_policy_parse(jsonb) TO mesh_worker;

-- The saved row parsed, or the install default; a row that cannot be parsed
-- raises (so acquisition fails rather than silently widening access).
CREATE OR REPLACE FUNCTION mesh.egress_policy_saved() RETURNS jsonb
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

-- PUT: validate and save; affects workspaces created from now on only.
CREATE OR REPLACE FUNCTION mesh.set_egress_policy(policy jsonb) RETURNS jsonb
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

------------------------------------------------------------------------------
-- 1.0's retention (sql/src/20_retention.sql, as there), with the grants a fresh install's
-- 90_privileges.sql gives it.
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
-- as 90_privileges.sql gives every table and function of the schema
GRANT SELECT, INSERT, UPDATE ON mesh.usage_daily TO mesh_worker;
REVOKE ALL ON FUNCTION mesh.retention_interval(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.retention_interval(text) TO mesh_worker;
-- pg_dump (README "Backup and restore"): 0.1 dumped every row of the live tables and
-- none of their sequences, and a restore failed on the rows CREATE EXTENSION makes.
-- Now a live run's rows and run tokens stay out, the id sequences come along, and a
-- restored policy row or embedded backend replaces the fresh install's own (01_catalog.sql).
------------------------------------------------------------------------------
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
SELECT pg_catalog.pg_extension_config_dump('mesh.snapshots', $$WHERE status <> 'capturing'$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.grants',
    $$WHERE run_id NOT IN (SELECT w.run_id FROM mesh.workspaces w
                            WHERE NOT (w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL)))$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.grants_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('mesh.run_tokens', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('mesh.snapshot_shares',
    $$WHERE snapshot_id IN (SELECT s.id FROM mesh.snapshots s WHERE s.status <> 'capturing')$$);
SELECT pg_catalog.pg_extension_config_dump('mesh.exec_output',
    $$WHERE exec_id IN (SELECT e.id FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
                         WHERE w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL))$$);

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
REVOKE ALL ON FUNCTION mesh.settings_restored(), mesh.backends_restored() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.settings_restored(), mesh.backends_restored() TO mesh_worker;
-- Statistics (sql/src/21_stats.sql): the views a monitoring stack scrapes.
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
GRANT USAGE ON SCHEMA mesh TO pg_monitor;
GRANT EXECUTE ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers()
      TO mesh_admin, pg_monitor;
GRANT SELECT ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents
      TO mesh_admin, pg_monitor;
GRANT EXECUTE ON FUNCTION mesh.stat_reset() TO mesh_admin;
-- as sql/src/90_privileges.sql gives the workers every table and function of the schema
GRANT SELECT, INSERT, UPDATE ON mesh.stat_backends, mesh.stat_backend_latency, mesh.stat_workers, mesh.stat_agents
      TO mesh_worker;
GRANT EXECUTE ON FUNCTION mesh.stat_get_backends(), mesh.stat_get_backend_latency(), mesh.stat_get_workers(),
                          mesh.stat_reset() TO mesh_worker;

------------------------------------------------------------------------------
-- An exec's end updates its workspace row once: the output bytes stored with it
-- are charged by mesh.exec_finish (p_output_stored), not by a second update.
------------------------------------------------------------------------------
DROP FUNCTION mesh.exec_finish(bigint, mesh.exec_status, integer, text, text, boolean, double precision,
                               double precision, double precision, text, text, bigint, jsonb);

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
REVOKE ALL ON FUNCTION mesh.exec_finish(bigint, mesh.exec_status, integer, text, text, boolean,
    double precision, double precision, double precision, text, text, bigint, jsonb, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.exec_finish(bigint, mesh.exec_status, integer, text, text, boolean,
    double precision, double precision, double precision, text, text, bigint, jsonb, bigint) TO mesh_worker;
