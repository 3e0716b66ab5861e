-- Conformance: isolation seen from inside a sandbox of :backend: not root, no capabilities,
-- a read-only system, no network to a service on the host's 127.0.0.1 (psql variables
-- probe_port: where the runner's probe listens; probe_hits: the file it logs connections
-- to), and no view of another workspace's files.
\set suite isolation
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-a' AS run \gset
SELECT :'tag' || '-b' AS peer \gset
SELECT 'mesh-probe-' || :'tag' AS probe \gset
SELECT plan(11);
SELECT is((SELECT status FROM mesh_acquire(:'run', :'agent', 'conformance')), 'pending', 'a run is declared');

SELECT isnt((SELECT stdout FROM pg_temp.x(:'run', ARRAY['id', '-u'])), E'0\n', 'commands do not run as root');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'grep CapEff /proc/self/status'])),
          E'CapEff:\t0000000000000000\n', 'with no effective capabilities');
SELECT isnt((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['touch', '/usr/' || :'probe'])), 0, '/usr cannot be written');
SELECT ok((SELECT pg_stat_file('/usr/' || :'probe', true) IS NULL), 'and nothing reached the host''s /usr');

-- network: the runner's probe on the host's loopback must stay untouched
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'command -v wget'])), 0,
          'the sandbox has a client to try the network with');
SELECT isnt((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['wget', '-q', '-T', '3', '-O', '-',
                                                           'http://127.0.0.1:' || :'probe_port' || '/'])), 0,
            'a connection to a service on the host''s 127.0.0.1 fails');
SELECT is(pg_read_file(:'probe_hits'), '', 'and the service saw no connection');

-- another workspace stays invisible
SELECT lives_ok(format('SELECT mesh_write_file(%L, %L, ''peer secret''::bytea)', :'run', :'probe' || '.txt'),
                'one run writes a file in its workspace');
SELECT is((SELECT status FROM mesh_acquire(:'peer', :'agent', 'conformance')), 'pending', 'a second run is declared');
SELECT is((SELECT stdout FROM pg_temp.x(:'peer', ARRAY['sh', '-c',
           'ls -a /workspace | grep -c ' || :'probe' || '; find /tmp /run /var/tmp /dev/shm -name ''' || :'probe' || '*'' 2>/dev/null | wc -l'])),
          E'0\n0\n', 'the second run''s sandbox cannot see the first run''s file');
SELECT mesh_release(:'run') \g /dev/null
SELECT mesh_release(:'peer') \g /dev/null
SELECT * FROM finish();
\endif
