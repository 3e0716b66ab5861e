-- Conformance: acquisition is lazy; exec semantics (exit codes, streams, stdin, env, dir,
-- missing program, timeout that kills the whole tree, clamped output, output stored whole)
-- on backend :backend.
\set suite exec
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-1' AS run \gset
SELECT plan(23);

-- acquisition is lazy: a row, no backend call
SELECT is((SELECT status FROM mesh_acquire(:'run', :'agent', 'conformance')), 'pending',
          'acquire declares the run without a sandbox');
SELECT is((SELECT count(*) FROM mesh.events WHERE run_id = :'run'), 0::bigint,
          'acquire alone makes no backend call');
SELECT is((SELECT external_ref FROM mesh.workspaces WHERE run_id = :'run'), NULL,
          'nor names a sandbox');

-- the first exec materializes on the pinned backend
SELECT results_eq(format('SELECT exit_code, stdout, stderr, status FROM pg_temp.x(%L, ARRAY[''echo'', ''hello'', ''world''])', :'run'),
                  $$VALUES (0, E'hello world\n', '', 'ok')$$, 'the first exec runs and materializes');
SELECT is((SELECT backend_kind || '/' || status FROM mesh.workspaces WHERE run_id = :'run'),
          :'backend' || '/ready', 'on the backend under test');

-- exit codes and separate streams
SELECT results_eq(format('SELECT exit_code, stdout, stderr FROM pg_temp.x(%L, ARRAY[''sh'', ''-c'', ''echo out; echo err >&2; exit 3''])', :'run'),
                  $$VALUES (3, E'out\n', E'err\n')$$, 'exit code 3 with stdout and stderr kept apart');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['no-such-program-xyz'])), 127,
          'a missing program exits 127');

-- stdin is binary-safe: all 256 byte values reach the command
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'od -An -tx1 -v | tr -d '' \n'''],
                                        stdin => (SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea) FROM generate_series(0, 255) b))),
          (SELECT string_agg(lpad(to_hex(b), 2, '0'), '') FROM generate_series(0, 255) b),
          'stdin delivers all 256 byte values');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['cat'], stdin => 'from stdin'::bytea)), 'from stdin',
          'stdin text reaches cat');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['cat'])), '', 'no stdin reads as empty');

-- env and dir
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'echo "$GREETING"'], env => '{"GREETING": "hi there"}')),
          E'hi there\n', 'env reaches the command');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['mkdir', '-p', 'sub/dir'])), 0, 'mkdir in the workspace');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['pwd'], dir => 'sub/dir')), E'/workspace/sub/dir\n',
          'dir is relative to the workspace');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['pwd'])), E'/workspace\n', 'the default dir is /workspace');

-- the timeout is a status, comes on time, and kills the command's whole tree
SELECT clock_timestamp() AS t0 \gset
SELECT results_eq(format('SELECT exit_code <> 0, status FROM pg_temp.x(%L, ARRAY[''sh'', ''-c'', ''(sleep 1; echo alive > late.txt) & sleep 30''], timeout => ''400 ms'')', :'run'),
                  $$VALUES (true, 'timeout')$$, 'a command over its timeout ends with status timeout');
SELECT cmp_ok(clock_timestamp() - :'t0'::timestamptz, '<', interval '5 seconds', 'and ends promptly');
SELECT pg_sleep(1.5) \g /dev/null
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['test', '-e', 'late.txt'])), 1,
          'its background child was killed with it (no late.txt a second later)');

-- large output is clamped: head and tail with the marker
SELECT results_eq(format($q$SELECT status, truncated, length(stdout) < 200000, stdout LIKE '%%bytes omitted%%', left(stdout, 6), right(stdout, 7)
                    FROM pg_temp.x(%L, ARRAY['sh', '-c', 'echo start; head -c 300000 /dev/zero | tr "\0" x; echo; echo finish'])$q$, :'run'),
                  $$VALUES ('ok', true, true, true, E'start\n', E'finish\n')$$, 'large output keeps head and tail with a marker');

-- and stored whole, as the command wrote it (NUL and invalid UTF-8 included), each stream apart
SELECT exec_id AS whole, stdout_bytes AS whole_bytes
  FROM mesh_exec(:'run', ARRAY['sh', '-c', 'printf "a\000b\377"; head -c 300000 /dev/zero | tr "\0" x; printf end; printf "e\000" >&2']) \gset
SELECT is(:whole_bytes::bigint, 300007::bigint, 'mesh_exec says how long the stored stdout is');
SELECT results_eq(format($q$SELECT length(data), substring(data FOR 4), substring(data FROM 300005), next_offset
                              FROM mesh_exec_output_bytes(%s, 'stdout', 0, 1000000)$q$, :whole),
                  $$VALUES (300007, '\x610062ff'::bytea, '\x656e64'::bytea, 300007::bigint)$$,
                  'stdout is stored whole, byte for byte');
SELECT is((SELECT data FROM mesh_exec_output_bytes(:whole, 'stderr')), '\x6500'::bytea,
          'stderr is stored apart, byte for byte');

-- every exec is a row, none left running
SELECT is((SELECT count(*) FILTER (WHERE status = 'running') FROM mesh.execs WHERE run_id = :'run'), 0::bigint,
          'no exec row is left running');
SELECT is((SELECT mesh_release(:'run')), 'destroyed', 'release destroys the sandbox');
SELECT * FROM finish();
\endif
