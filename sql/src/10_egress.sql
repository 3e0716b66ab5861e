------------------------------------------------------------------------------
-- Workspace network access (egress): the instance policy, captured per
-- workspace at materialization.  No saved row means mode "open".
------------------------------------------------------------------------------

-- The saved policy as written (mesh.set_egress_policy).
CREATE TABLE mesh.egress_settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    policy     jsonb NOT NULL,
    set_at     timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('mesh.egress_settings', '');

-- The built-in allowlist (source hosts and package registries): the one list.
CREATE FUNCTION mesh.egress_default_domains() RETURNS text[]
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY['github.com', '*.github.com', '*.githubusercontent.com',
                 'gitlab.com', '*.gitlab.com', 'bitbucket.org',
                 'registry.npmjs.org', 'registry.yarnpkg.com',
                 'pypi.org', 'files.pythonhosted.org',
                 'crates.io', 'index.crates.io', 'static.crates.io',
                 'proxy.golang.org', 'sum.golang.org',
                 'rubygems.org', 'repo.maven.apache.org', 'repo1.maven.org',
                 'deb.debian.org', 'security.debian.org',
                 'archive.ubuntu.com', 'security.ubuntu.com', 'dl-cdn.alpinelinux.org']
$$;

-- A domain pattern: a DNS name with at least two labels, lower case, optionally
-- "*." as its whole first label.  No IP addresses, ports or schemes.
CREATE FUNCTION mesh.egress_domain_valid(d text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT d IS NOT NULL AND length(d) <= 253
       AND d ~ '^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'
$$;

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

-- The saved row parsed, or the install default; a row that cannot be parsed
-- raises (so acquisition fails rather than silently widening access).
CREATE FUNCTION mesh.egress_policy_saved() RETURNS jsonb
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

-- GET: the policy in force and the built-in domains it adds in allowlist mode.
CREATE FUNCTION mesh.egress_policy() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT egress_policy_saved()
           || jsonb_build_object('default_domains', to_jsonb(egress_default_domains()),
                                 'saved', EXISTS (SELECT 1 FROM mesh.egress_settings))
$$;

-- PUT: validate and save; affects workspaces created from now on only.
CREATE FUNCTION mesh.set_egress_policy(policy jsonb) RETURNS jsonb
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

-- What a new workspace on a backend with these capabilities gets, recorded in
-- mesh.workspaces.egress by the worker in the transaction that picks the
-- backend (before the backend is called).  Raises when the backend cannot
-- enforce the allowlist and the policy refuses such backends.
CREATE FUNCTION mesh.workspace_egress(backend text, caps jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    p jsonb := egress_policy_saved();
    capable boolean := coalesce((caps->>'egress_control')::boolean, false);
BEGIN
    IF p->>'mode' = 'open' THEN
        RETURN jsonb_build_object('mode', 'open', 'policy_mode', 'open', 'enforced', capable);
    ELSIF capable THEN
        RETURN jsonb_build_object('mode', 'allowlist', 'policy_mode', 'allowlist', 'enforced', true,
            'domains', to_jsonb(ARRAY(SELECT DISTINCT x FROM unnest(egress_default_domains()
                    || ARRAY(SELECT jsonb_array_elements_text(p->'domains'))) x ORDER BY 1)));
    ELSIF p->>'uncontrolled' = 'allow' THEN
        RETURN jsonb_build_object('mode', 'open', 'policy_mode', 'allowlist', 'enforced', false,
                                  'uncontrolled', 'allow');
    END IF;
    RAISE EXCEPTION 'backend "%" cannot enforce the workspace egress allowlist (egress_control is false)', backend
          USING ERRCODE = 'object_not_in_prerequisite_state',
                HINT = 'Pin the agent to a backend with egress_control, or accept open egress on such backends with mesh.set_egress_policy(''{"mode": "allowlist", ..., "uncontrolled": "allow"}'').';
END
$$;

-- "What could this run see" on the network: its workspace's captured policy.
CREATE FUNCTION mesh.run_network(p_run_id text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT mesh.require_args('run_network', ARRAY['run_id'], ARRAY[p_run_id IS NULL]);
    SELECT coalesce(w.egress, jsonb_build_object('mode', 'not materialized'))
           || jsonb_build_object('backend', w.backend_kind, 'status', w.status::text)
      FROM mesh.workspaces w WHERE w.run_id = p_run_id
$$;
