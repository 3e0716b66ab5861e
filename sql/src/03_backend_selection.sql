------------------------------------------------------------------------------
-- Backend selection, used by the workers at materialization.
------------------------------------------------------------------------------
-- Which enabled backend a new workspace of this agent uses: the agent's pin,
-- else the first enabled backend in catalog order.  Never falls through from
-- a pin to another backend.
CREATE FUNCTION mesh.select_backend(p_agent_id text,
                                    OUT backend text, OUT implicit boolean, OUT size mesh.size_tier)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    pin text;
    pin_enabled boolean;
    wanted mesh.size_tier;
    climbed mesh.size_tier;
    ceiling mesh.size_tier;
    enabled_count integer;
BEGIN
    SELECT a.backend, a.default_size, a.climbed_size INTO pin, wanted, climbed
      FROM mesh.agents a WHERE a.agent_id = p_agent_id;
    SELECT count(*) INTO enabled_count FROM mesh.backends b WHERE b.enabled;
    IF pin IS NOT NULL THEN
        SELECT b.enabled INTO pin_enabled FROM mesh.backends b WHERE b.name = pin;
        IF NOT coalesce(pin_enabled, false) THEN
            RAISE EXCEPTION 'agent "%" is pinned to backend "%", which is not enabled', p_agent_id, pin
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Enable the backend with mesh.backend_enable(), or clear the pin with mesh.agent_set(agent_id, backend => NULL).';
        END IF;
        backend := pin;
        implicit := false;
    ELSE
        SELECT b.name INTO backend FROM mesh.backends b WHERE b.enabled
            ORDER BY b.catalog_order, b.name LIMIT 1;
        IF backend IS NULL THEN
            RAISE EXCEPTION 'no backend is enabled'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Add one with mesh.backend_add(), or enable one with mesh.backend_enable().';
        END IF;
        implicit := enabled_count > 1;
    END IF;
    SELECT b.max_size INTO ceiling FROM mesh.backends b WHERE b.name = backend;
    -- an OOM climb raises the tier, never above the backend's ceiling
    size := least(greatest(coalesce(wanted, 'standard'), climbed), ceiling);
END
$$;
