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
