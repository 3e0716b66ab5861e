-- test/pgtap/kubernetes_config.sql: the kubernetes driver's config is validated when written,
-- and the error names the bad field (src/backends/kubernetes.c, docs/kubernetes.md).
BEGIN;
SELECT plan(16);

CREATE TEMP TABLE good AS SELECT jsonb_build_object(
    'api_server', 'https://10.0.0.1:6443', 'namespace', 'mesh', 'image', 'reg.example/mesh-sandboxd:0.1',
    'ca_bundle', E'-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n') AS c;

SELECT lives_ok($$SELECT mesh.validate_backend_config('kubernetes', (SELECT c FROM good))$$,
                'a complete config is accepted');
SELECT lives_ok($$SELECT mesh.validate_backend_config('kubernetes', (SELECT c || '{"runtime_class": "gvisor",
                  "node_selector": {"pool": "agents"}, "image_pull_policy": "Always", "daemon_port": 7443,
                  "apparmor_profile": "mesh-sandboxd",
                  "tolerations": [{"key": "agents", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]}' FROM good))$$,
                'with every optional field');

-- the field the error names for a config, or 'accepted'
CREATE FUNCTION pg_temp.refused(config jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mesh.validate_backend_config('kubernetes', config);
    RETURN 'accepted';
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN split_part(split_part(SQLERRM, ': ', 2), ' ', 1);
END $$;
CREATE FUNCTION pg_temp.refused(patch text) RETURNS text LANGUAGE sql AS
    $$SELECT pg_temp.refused((SELECT c FROM good) || patch::jsonb)$$;
CREATE FUNCTION pg_temp.without(field text) RETURNS text LANGUAGE sql AS
    $$SELECT pg_temp.refused((SELECT c FROM good) - field)$$;

SELECT is(pg_temp.refused(text '{"api_server": "http://10.0.0.1:6443"}'), 'api_server', 'plain http is refused');
SELECT is(pg_temp.refused(text '{"api_server": "https://user:tok@10.0.0.1"}'), 'api_server', 'credentials in the URL are refused');
SELECT is(pg_temp.without('namespace'), 'namespace', 'the namespace is required');
SELECT is(pg_temp.refused(text '{"namespace": "Mesh_NS"}'), 'namespace', 'a namespace must be a DNS label');
SELECT is(pg_temp.refused(text '{"ca_bundle": "not a certificate"}'), 'ca_bundle', 'the CA bundle must be PEM');
SELECT is(pg_temp.without('image'), 'image', 'the image is required');
SELECT is(pg_temp.refused(text '{"runtime_class": "G Visor"}'), 'runtime_class', 'a runtime class must be a name');
SELECT is(pg_temp.refused(text '{"node_selector": {"pool": 1}}'), 'node_selector', 'node selector values are strings');
SELECT is(pg_temp.refused(text '{"tolerations": [{"key": "a", "operator": "Maybe"}]}'), 'tolerations', 'a toleration operator must be known');
SELECT is(pg_temp.refused(text '{"tolerations": [{"keey": "a"}]}'), 'tolerations', 'a toleration field must be known');
SELECT is(pg_temp.refused(text '{"image_pull_policy": "Sometimes"}'), 'image_pull_policy', 'the pull policy must be known');
SELECT is(pg_temp.refused(text '{"daemon_port": 70000}'), 'daemon_port', 'the daemon port must be a port');
SELECT is(pg_temp.refused(text '{"apparmor_profile": "un confined"}'), 'apparmor_profile', 'an AppArmor profile must be a name');
SELECT is(pg_temp.refused(text '{"token": "abc"}'), 'token', 'an unknown field (a token in the config) is refused by name');

SELECT * FROM finish();
ROLLBACK;
