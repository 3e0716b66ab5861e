-- files: binary-safe round trips, modes, parents, confinement.
\set ON_ERROR_STOP 0
SELECT status FROM mesh_acquire('files-1', 'agent-f', 'carol');
-- writing materializes too
SELECT mesh_write_file('files-1', 'bin/all-bytes', (SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea) FROM generate_series(0, 255) b));
SELECT length(mesh_read_file('files-1', 'bin/all-bytes')) AS bytes,
       mesh_read_file('files-1', 'bin/all-bytes') = (SELECT string_agg(set_byte('\x00'::bytea, 0, b), ''::bytea) FROM generate_series(0, 255) b) AS identical;
-- the command sees exactly what was written
SELECT stdout FROM mesh_exec('files-1', ARRAY['sh', '-c', 'od -An -tx1 bin/all-bytes | head -1']);
-- empty file, overwrite, mode, absolute path inside the workspace
SELECT mesh_write_file('files-1', 'empty', ''::bytea);
SELECT length(mesh_read_file('files-1', 'empty')) AS empty_len;
SELECT mesh_write_file('files-1', 'script.sh', E'#!/bin/sh\necho script ran\n'::bytea, 493);
SELECT stdout FROM mesh_exec('files-1', ARRAY['./script.sh']);
SELECT stdout FROM mesh_exec('files-1', ARRAY['stat', '-c', '%a', 'script.sh']);
SELECT mesh_write_file('files-1', '/workspace/abs.txt', 'absolute'::bytea);
SELECT convert_from(mesh_read_file('files-1', 'abs.txt'), 'UTF8') AS abs;
-- a file the command made is readable
SELECT exit_code FROM mesh_exec('files-1', ARRAY['sh', '-c', 'printf "made\000inside" > made.bin']);
SELECT mesh_read_file('files-1', 'made.bin');
-- confinement: missing, outside, symlink out, directory
SELECT mesh_read_file('files-1', 'missing.txt');
SELECT mesh_read_file('files-1', '/etc/passwd');
SELECT exit_code FROM mesh_exec('files-1', ARRAY['ln', '-s', '/etc', 'etc-link']);
SELECT mesh_read_file('files-1', 'etc-link/passwd');
SELECT mesh_write_file('files-1', 'etc-link/evil', 'x'::bytea);
SELECT mesh_read_file('files-1', 'bin');
-- every write and read is a row
SELECT kind, detail->>'path' AS path, detail ? 'failure' AS failed
  FROM mesh.events WHERE run_id = 'files-1' AND kind LIKE 'file_%' ORDER BY id;
SELECT mesh_release('files-1');
