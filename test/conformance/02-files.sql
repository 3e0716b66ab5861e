-- Conformance: files are binary-safe, keep their mode, create parents, and stay confined to
-- the workspace (traversal, absolute paths outside, symlinks out, directories) on :backend.
\set suite files
\ir lib.psql
\if :run_suite
SELECT :'tag' || '-1' AS run \gset
SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea) AS all_bytes FROM generate_series(0, 255) b \gset
SELECT plan(24);
SELECT is((SELECT status FROM mesh_acquire(:'run', :'agent', 'conformance')), 'pending', 'a run is declared');

-- round trips
SELECT lives_ok(format('SELECT mesh_write_file(%L, ''bin/all-bytes'', %L::bytea)', :'run', :'all_bytes'),
                'writing materializes and creates the parent directory');
SELECT is(mesh_read_file(:'run', 'bin/all-bytes'), :'all_bytes'::bytea, 'all 256 byte values read back identical');
SELECT is((SELECT stdout FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'od -An -tx1 -v bin/all-bytes | tr -d '' \n'''])),
          (SELECT string_agg(lpad(to_hex(b), 2, '0'), '') FROM generate_series(0, 255) b),
          'the command sees exactly the bytes written');
SELECT lives_ok(format('SELECT mesh_write_file(%L, ''empty'', ''''::bytea)', :'run'), 'an empty file can be written');
SELECT is(length(mesh_read_file(:'run', 'empty')), 0, 'and reads back empty');
SELECT lives_ok(format('SELECT mesh_write_file(%L, ''over.txt'', ''first version''::bytea)', :'run'), 'a file is written');
SELECT lives_ok(format('SELECT mesh_write_file(%L, ''over.txt'', ''2nd''::bytea)', :'run'), 'and overwritten');
SELECT is(convert_from(mesh_read_file(:'run', 'over.txt'), 'UTF8'), '2nd', 'the overwrite replaces the content');
SELECT lives_ok(format('SELECT mesh_write_file(%L, ''a/b/c/deep.txt'', ''deep''::bytea)', :'run'), 'parents are created');
SELECT lives_ok(format($q$SELECT mesh_write_file(%L, 'run.sh', E'#!/bin/sh\necho script ran\n'::bytea, 493)$q$, :'run'),
                'a file is written with mode 0755');
SELECT results_eq(format('SELECT exit_code, stdout FROM pg_temp.x(%L, ARRAY[''./run.sh''])', :'run'),
                  $$VALUES (0, E'script ran\n')$$, 'and runs as a program');
SELECT is(convert_from(mesh_read_file(:'run', '/workspace/a/b/c/deep.txt'), 'UTF8'), 'deep',
          'absolute paths inside /workspace work');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'printf "made\000inside" > made.bin'])), 0,
          'the command makes a file');
SELECT is(mesh_read_file(:'run', 'made.bin'), '\x6d61646500696e73696465'::bytea, 'which reads back with its NUL');

-- confinement
SELECT throws_ok(format('SELECT mesh_read_file(%L, ''missing.txt'')', :'run'), '58P01', NULL, 'a missing file is not found');
SELECT throws_ok(format('SELECT mesh_read_file(%L, ''/etc/passwd'')', :'run'), '42501', NULL,
                 'an absolute path outside the workspace is refused');
SELECT throws_ok(format('SELECT mesh_write_file(%L, ''sub/../../escape'', ''x''::bytea)', :'run'), '42501', NULL,
                 'traversal with .. is refused');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['sh', '-c', 'ln -s /etc etc-link && ln -s /etc/passwd pw-link'])), 0,
          'the command makes symlinks out of the workspace');
SELECT throws_ok(format('SELECT mesh_read_file(%L, ''etc-link/passwd'')', :'run'), '42501', NULL,
                 'reading through a symlinked directory out is refused');
SELECT throws_ok(format('SELECT mesh_write_file(%L, ''etc-link/mesh-evil'', ''x''::bytea)', :'run'), '42501', NULL,
                 'writing through a symlinked directory out is refused');
SELECT throws_ok(format('SELECT mesh_read_file(%L, ''pw-link'')', :'run'), '42501', NULL,
                 'reading a symlink to a file outside is refused');
SELECT is((SELECT exit_code FROM pg_temp.x(:'run', ARRAY['test', '-e', '/etc/mesh-evil'])), 1,
          'and nothing landed outside');
SELECT throws_ok(format('SELECT mesh_read_file(%L, ''bin'')', :'run'), '42501', NULL, 'reading a directory is refused');
SELECT mesh_release(:'run') \g /dev/null
SELECT * FROM finish();
\endif
