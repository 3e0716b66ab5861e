------------------------------------------------------------------------------
-- Admin functions: the only way to configure backends and agents.
------------------------------------------------------------------------------
-- The one error for a required argument given as NULL: names[i] is missing
-- when missing[i] is true.
CREATE FUNCTION mesh.require_args(fn text, names text[], missing boolean[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    FOR i IN 1 .. cardinality(names) LOOP
        IF missing[i] THEN
            RAISE EXCEPTION '%: % must not be NULL', CASE WHEN fn LIKE 'mesh\_%' THEN fn ELSE 'mesh.' || fn END, names[i]
                USING ERRCODE = 'null_value_not_allowed', HINT = format('Pass a value for %s.', names[i]);
        END IF;
    END LOOP;
END
$$;

-- The one error for a backend name that is not in the catalog.
CREATE FUNCTION mesh.raise_unknown_backend(name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'backend "%" does not exist', name
        USING ERRCODE = 'undefined_object', HINT = 'See mesh.backend_catalog for configured backends.';
END
$$;

CREATE FUNCTION mesh.backend_add(name text, driver text, config jsonb DEFAULT '{}',
                                 enabled boolean DEFAULT true, catalog_order integer DEFAULT 100,
                                 max_size mesh.size_tier DEFAULT 'xlarge')
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_add', ARRAY['name', 'driver', 'config', 'enabled', 'catalog_order', 'max_size'],
        ARRAY[backend_add.name IS NULL, backend_add.driver IS NULL, backend_add.config IS NULL,
              backend_add.enabled IS NULL, backend_add.catalog_order IS NULL,
              backend_add.max_size IS NULL]);
    PERFORM mesh.validate_backend_config(driver, config);
    INSERT INTO mesh.backends AS b (name, driver, enabled, catalog_order, config, max_size)
    VALUES (backend_add.name, backend_add.driver, backend_add.enabled,
            backend_add.catalog_order, backend_add.config, backend_add.max_size);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'backend "%" already exists', backend_add.name
        USING ERRCODE = 'duplicate_object', HINT = 'Use mesh.backend_configure() to change it.';
END
$$;

CREATE FUNCTION mesh.backend_configure(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    drv text;
BEGIN
    PERFORM mesh.require_args('backend_configure', ARRAY['name', 'config'],
        ARRAY[backend_configure.name IS NULL, backend_configure.config IS NULL]);
    SELECT b.driver INTO drv FROM mesh.backends b WHERE b.name = backend_configure.name FOR UPDATE;
    IF drv IS NULL THEN
        PERFORM mesh.raise_unknown_backend(backend_configure.name);
    END IF;
    PERFORM mesh.validate_backend_config(drv, config);
    UPDATE mesh.backends b SET config = backend_configure.config, updated_at = now()
     WHERE b.name = backend_configure.name;
END
$$;

CREATE FUNCTION mesh.backend_enable(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_enable', ARRAY['name'], ARRAY[backend_enable.name IS NULL]);
    UPDATE mesh.backends b SET enabled = true, updated_at = now() WHERE b.name = backend_enable.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_enable.name);
    END IF;
END
$$;

-- Disabling un-pins the backend's agents in the same transaction and
-- reports which were reset.  What the backend minted is still released.
CREATE FUNCTION mesh.backend_disable(name text, OUT reset_agents text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_disable', ARRAY['name'],
        ARRAY[backend_disable.name IS NULL]);
    UPDATE mesh.backends b SET enabled = false, updated_at = now() WHERE b.name = backend_disable.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_disable.name);
    END IF;
    WITH reset AS (
        UPDATE mesh.agents a SET backend = NULL WHERE a.backend = backend_disable.name
        RETURNING a.agent_id)
    SELECT coalesce(array_agg(agent_id ORDER BY agent_id), '{}') INTO reset_agents FROM reset;
    INSERT INTO mesh.events (kind, backend, detail)
    VALUES ('backend_disabled', backend_disable.name, jsonb_build_object('reset_agents', reset_agents));
END
$$;

-- Write-only: nothing reads a credential back through SQL.
CREATE FUNCTION mesh.backend_set_credential(name text, credential text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_credential', ARRAY['name', 'credential'],
        ARRAY[backend_set_credential.name IS NULL, backend_set_credential.credential IS NULL]);
    IF credential = '' THEN
        RAISE EXCEPTION 'credential must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM mesh.backends b WHERE b.name = backend_set_credential.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_credential.name);
    END IF;
    INSERT INTO mesh.backend_credentials AS c (backend, credential)
    VALUES (backend_set_credential.name, backend_set_credential.credential)
    ON CONFLICT (backend) DO UPDATE SET credential = excluded.credential, set_at = now();
    INSERT INTO mesh.events (kind, backend) VALUES ('credential_set', backend_set_credential.name);
END
$$;

CREATE FUNCTION mesh.backend_set_order(name text, catalog_order integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_order', ARRAY['name', 'catalog_order'],
        ARRAY[backend_set_order.name IS NULL, backend_set_order.catalog_order IS NULL]);
    UPDATE mesh.backends b SET catalog_order = backend_set_order.catalog_order, updated_at = now()
     WHERE b.name = backend_set_order.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_order.name);
    END IF;
END
$$;

CREATE FUNCTION mesh.backend_set_max_size(name text, max_size mesh.size_tier)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('backend_set_max_size', ARRAY['name', 'max_size'],
        ARRAY[backend_set_max_size.name IS NULL, backend_set_max_size.max_size IS NULL]);
    UPDATE mesh.backends b SET max_size = backend_set_max_size.max_size, updated_at = now()
     WHERE b.name = backend_set_max_size.name;
    IF NOT FOUND THEN
        PERFORM mesh.raise_unknown_backend(backend_set_max_size.name);
    END IF;
END
$$;

-- Per-agent settings.  A pin can only name a backend that is enabled now.
CREATE FUNCTION mesh.agent_set(agent_id text, backend text DEFAULT NULL,
                               default_size mesh.size_tier DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_set', ARRAY['agent_id'], ARRAY[agent_set.agent_id IS NULL]);
    IF backend IS NOT NULL AND NOT EXISTS
        (SELECT 1 FROM mesh.backends b WHERE b.name = agent_set.backend AND b.enabled) THEN
        RAISE EXCEPTION 'cannot pin agent "%" to backend "%": it is not an enabled backend',
                        agent_set.agent_id, agent_set.backend
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'See mesh.backend_catalog for the enabled backends.';
    END IF;
    INSERT INTO mesh.agents AS a (agent_id, backend, default_size)
    VALUES (agent_set.agent_id, agent_set.backend, agent_set.default_size)
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE SET backend = excluded.backend,
                                         default_size = excluded.default_size;
END
$$;

-- Budgets: per agent, per run override, instance default.  NULL clears a limit.
CREATE FUNCTION mesh.agent_set_budget(agent_id text, max_compute_seconds double precision DEFAULT NULL,
                                      max_concurrent_workspaces integer DEFAULT NULL,
                                      idle_timeout interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_set_budget', ARRAY['agent_id'],
        ARRAY[agent_set_budget.agent_id IS NULL]);
    INSERT INTO mesh.agents AS a (agent_id, max_compute_seconds, max_concurrent_workspaces, idle_timeout)
    VALUES (agent_set_budget.agent_id, agent_set_budget.max_compute_seconds,
            agent_set_budget.max_concurrent_workspaces, agent_set_budget.idle_timeout)
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE
       SET max_compute_seconds = excluded.max_compute_seconds,
           max_concurrent_workspaces = excluded.max_concurrent_workspaces,
           idle_timeout = excluded.idle_timeout;
END
$$;

CREATE FUNCTION mesh.run_set_budget(run_id text, max_compute_seconds double precision DEFAULT NULL,
                                    idle_timeout interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('run_set_budget', ARRAY['run_id'],
        ARRAY[run_set_budget.run_id IS NULL]);
    INSERT INTO mesh.run_budgets AS b (run_id, max_compute_seconds, idle_timeout)
    VALUES (run_set_budget.run_id, run_set_budget.max_compute_seconds, run_set_budget.idle_timeout)
    ON CONFLICT ON CONSTRAINT run_budgets_pkey DO UPDATE
       SET max_compute_seconds = excluded.max_compute_seconds,
           idle_timeout = excluded.idle_timeout, set_at = now();
END
$$;

CREATE FUNCTION mesh.set_policy(max_run_lifetime interval DEFAULT NULL, idle_timeout interval DEFAULT NULL,
                                max_compute_seconds double precision DEFAULT NULL,
                                run_ownership boolean DEFAULT NULL,
                                tier_climb_reset_runs integer DEFAULT NULL,
                                max_background_per_run integer DEFAULT NULL)
RETURNS mesh.settings LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    result mesh.settings;
BEGIN
    IF set_policy.tier_climb_reset_runs < 1 THEN
        RAISE EXCEPTION 'tier_climb_reset_runs must be at least 1, not %', set_policy.tier_climb_reset_runs
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the number of clean runs at a climbed tier after which an agent returns to its own tier.';
    END IF;
    IF set_policy.max_background_per_run < 1 THEN
        RAISE EXCEPTION 'max_background_per_run must be at least 1, not %', set_policy.max_background_per_run
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It is the number of background commands one run may have running at once.';
    END IF;
    UPDATE mesh.settings s
       SET max_run_lifetime = coalesce(set_policy.max_run_lifetime, s.max_run_lifetime),
           idle_timeout = coalesce(set_policy.idle_timeout, s.idle_timeout),
           max_compute_seconds = set_policy.max_compute_seconds,
           run_ownership = coalesce(set_policy.run_ownership, s.run_ownership),
           tier_climb_reset_runs = coalesce(set_policy.tier_climb_reset_runs, s.tier_climb_reset_runs),
           max_background_per_run = coalesce(set_policy.max_background_per_run, s.max_background_per_run)
    RETURNING * INTO result;
    RETURN result;
END
$$;

-- The budget in force for a run: its override, else its agent's, else the instance's.
CREATE VIEW mesh.run_limits AS
SELECT w.id AS workspace_id, w.run_id, w.agent_id,
       coalesce(rb.max_compute_seconds, a.max_compute_seconds, s.max_compute_seconds) AS max_compute_seconds,
       coalesce(rb.idle_timeout, a.idle_timeout, s.idle_timeout) AS idle_timeout,
       a.max_concurrent_workspaces,
       -- mesh_extend of a live workspace moves its run's bound
       s.max_run_lifetime + coalesce(rb.lifetime_extension, '0') AS max_run_lifetime
  FROM mesh.workspaces w
  CROSS JOIN mesh.settings s
  LEFT JOIN mesh.agents a ON a.agent_id = w.agent_id
  LEFT JOIN mesh.run_budgets rb ON rb.run_id = w.run_id;
