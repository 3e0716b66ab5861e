------------------------------------------------------------------------------
-- Run ownership (mesh.settings.run_ownership, on by default): a run belongs
-- to the role that declared it, a snapshot to the role that owns the run it
-- was captured from, an agent to the role that claimed it and those an admin
-- granted it to.  The workers check it for every call, the views the harness
-- reads filter by it, so several harness services share a database without
-- reaching each other.  An admin turns it off for a single-tenant install
-- (mesh.set_policy(run_ownership => false)): every harness role then sees and
-- drives every run, agent and snapshot.
------------------------------------------------------------------------------
-- May role caller see and drive what owner owns?  Its owner's members,
-- mesh_admin's members and superusers always may.  PL/pgSQL, not SQL: a SQL
-- function that cannot be inlined (this one is SECURITY DEFINER) is parsed
-- and planned again for every statement that calls it, and the workers call
-- it for every call; PL/pgSQL keeps its plan for the session.
-- (pg_has_role answers false for a role dropped since it was recorded.)
CREATE FUNCTION mesh.may_drive(owner regrole, caller oid) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    RETURN (SELECT NOT s.run_ownership OR owner IS NULL OR caller IS NULL
                   OR pg_has_role(caller, owner::oid, 'MEMBER') OR pg_has_role(caller, 'mesh_admin', 'MEMBER')
              FROM mesh.settings s);
END
$$;

-- May role caller declare runs under the agent?  A role the agent was
-- claimed by or granted to, or one of its members; an admin always may.
CREATE FUNCTION mesh.agent_usable(p_agent_id text, caller oid) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF caller IS NULL OR NOT (SELECT s.run_ownership FROM mesh.settings s)
       OR pg_has_role(caller, 'mesh_admin', 'MEMBER') THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM mesh.agent_roles r
                    WHERE r.agent_id = p_agent_id AND pg_has_role(caller, r.role_oid::oid, 'MEMBER'));
END
$$;

-- At a run's declaration (mesh.workspace_declare, in the worker's
-- transaction), when the declaring role may not use the agent
-- (mesh.agent_usable): it claims the agent if nobody has (under the agent's
-- row lock, so two roles cannot both claim it), else is refused.  An agent
-- that holds secrets is never claimed: an admin gives it (mesh.agent_grant),
-- as the secrets.  The refusal names nothing of who uses the agent.
CREATE FUNCTION mesh.agent_claim(p_agent_id text, caller oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    claimed_at timestamptz := (mesh.agent_lock(p_agent_id)).access_set_at;
BEGIN
    IF claimed_at IS NULL AND NOT EXISTS (SELECT 1 FROM mesh.secrets s WHERE s.agent_id = p_agent_id) THEN
        INSERT INTO mesh.agent_roles (agent_id, role_oid, how) VALUES (p_agent_id, caller::regrole, 'claimed');
        UPDATE mesh.agents a SET access_set_at = now() WHERE a.agent_id = p_agent_id;
        INSERT INTO mesh.events (kind, detail)
        VALUES ('agent_claimed', jsonb_build_object('agent_id', p_agent_id, 'role', caller::regrole::text));
        RETURN;
    END IF;
    -- a fresh statement: a grant committed while this one waited for the lock counts
    IF mesh.agent_usable(p_agent_id, caller) THEN
        RETURN;
    END IF;
    -- not even the agent's name: the caller's own words are all it is told
    RAISE EXCEPTION 'this role may not declare runs under the agent it named'
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'An agent serves the role that declared its first run and the roles an admin grants it to with mesh.agent_grant(agent_id, role); an agent holding secrets only those. Use an agent of this role''s own.';
END
$$;

-- Admin: let role (and its members) declare runs under the agent; the agent
-- is no longer claimable.
CREATE FUNCTION mesh.agent_grant(agent_id text, role regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    PERFORM mesh.require_args('agent_grant', ARRAY['agent_id', 'role'],
        ARRAY[agent_grant.agent_id IS NULL, agent_grant.role IS NULL]);
    INSERT INTO mesh.agents AS a (agent_id, access_set_at) VALUES (agent_grant.agent_id, now())
    ON CONFLICT ON CONSTRAINT agents_pkey DO UPDATE SET access_set_at = coalesce(a.access_set_at, now());
    INSERT INTO mesh.agent_roles AS r (agent_id, role_oid, how) VALUES (agent_grant.agent_id, agent_grant.role, 'granted')
    ON CONFLICT ON CONSTRAINT agent_roles_pkey DO NOTHING;
    INSERT INTO mesh.events (kind, detail)
    VALUES ('agent_granted', jsonb_build_object('agent_id', agent_grant.agent_id, 'role', agent_grant.role::text,
                                                'by', session_user));
END
$$;

-- Admin: role no longer declares runs under the agent (claimed or granted);
-- its live runs there lose their secret grants at once (the broker refuses
-- them), unless it may still use the agent through another role.  The agent
-- stays unclaimable.
CREATE FUNCTION mesh.agent_revoke(agent_id text, role regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    cut integer;
BEGIN
    PERFORM mesh.require_args('agent_revoke', ARRAY['agent_id', 'role'],
        ARRAY[agent_revoke.agent_id IS NULL, agent_revoke.role IS NULL]);
    DELETE FROM mesh.agent_roles r WHERE r.agent_id = agent_revoke.agent_id AND r.role_oid = agent_revoke.role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % has no access of its own to agent "%"', agent_revoke.role, agent_revoke.agent_id
            USING ERRCODE = 'undefined_object', HINT = 'See mesh.agent_access.';
    END IF;
    WITH revoked AS (
        UPDATE mesh.grants g SET revoked_at = now(), revoked_reason = 'the run''s role lost access to its agent'
          FROM mesh.workspaces w
         WHERE g.run_id = w.run_id AND g.revoked_at IS NULL AND w.agent_id = agent_revoke.agent_id
           AND w.status NOT IN ('released', 'failed') AND w.owner_role IS NOT NULL
           AND NOT mesh.agent_usable(agent_revoke.agent_id, w.owner_role::oid)
        RETURNING 1)
    SELECT count(*) INTO cut FROM revoked;
    INSERT INTO mesh.events (kind, detail)
    VALUES ('agent_revoked', jsonb_build_object('agent_id', agent_revoke.agent_id, 'role', agent_revoke.role::text,
                                                'by', session_user, 'grants_revoked', cut));
END
$$;

-- Admin: who may declare runs under which agent, and how they came to.
CREATE VIEW mesh.agent_access AS
SELECT r.agent_id, r.role_oid AS role, r.how, r.granted_at FROM mesh.agent_roles r;
