-- exec_output: every exec's stdout and stderr are stored whole, as the
-- command wrote them, and read back from byte offsets; mesh_exec and
-- mesh.execs keep the head+tail clamp for people.
\set ON_ERROR_STOP 0
SELECT status FROM mesh_acquire('out-1', 'agent-out', 'olga');

-- bytes as they came: NUL and invalid UTF-8 stay in what is stored
SELECT exec_id AS raw FROM mesh_exec('out-1', ARRAY['sh', '-c', 'printf "a\000b\377c"; printf "e\n" >&2']) \gset
SELECT data, next_offset FROM mesh_exec_output_bytes(:raw);
SELECT data, next_offset FROM mesh_exec_output_bytes(:raw, 'stderr');
-- as text for people: U+FFFD where the bytes are not text
SELECT status, exit_code, stdout, stderr, stdout_next, stderr_next FROM mesh_exec_output(:raw);
SELECT stream, bytes, dropped, output FROM mesh.exec_output_text WHERE exec_id = :raw ORDER BY stream;
-- 64 KiB of NUL bytes are stored as 64 KiB
SELECT exec_id AS nul FROM mesh_exec('out-1', ARRAY['head', '-c', '65536', '/dev/zero']) \gset
SELECT stdout_bytes, stdout_dropped, (SELECT sum(length(data)) FROM mesh.exec_output WHERE exec_id = :nul) AS stored,
       (SELECT data FROM mesh_exec_output_bytes(:nul)) = decode(repeat('00', 65536), 'hex') AS identical
  FROM mesh.execs WHERE id = :nul;

-- output larger than mesh.max_output: clamped in the row, whole in the store (1 MB chunks)
-- and mesh_exec says how long each stream is as stored
SELECT exec_id AS seq, truncated, stdout LIKE '%bytes omitted%' AS marked, length(stdout) < 100000 AS clamped,
       stdout_bytes AS seq_bytes, stderr_bytes AS seq_err_bytes
  FROM mesh_exec('out-1', ARRAY['seq', '1', '300000']) \gset
SELECT :'truncated' AS truncated, :'marked' AS marked, :'clamped' AS clamped,
       :seq_bytes AS stdout_bytes, :seq_err_bytes AS stderr_bytes;
SELECT stdout_bytes, stdout_dropped, truncated FROM mesh.execs WHERE id = :seq;
SELECT count(*) AS chunks, min(start_offset) AS first_chunk FROM mesh.exec_output WHERE exec_id = :seq;
SELECT (SELECT data FROM mesh_exec_output_bytes(:seq, max_bytes => 10000000))
       = convert_to(string_agg(i::text || E'\n', '' ORDER BY i), 'UTF8') AS identical
  FROM generate_series(1, 300000) i;
-- polling from offsets: pieces that follow each other make up the whole, no duplicates
SELECT stdout, stdout_next FROM mesh_exec_output(:seq, 0, 0, 8);
SELECT stdout, stdout_next FROM mesh_exec_output(:seq, 8, 0, 8);
SELECT length(data), next_offset FROM mesh_exec_output_bytes(:seq, 'stdout', 1048570, 20);
SELECT length(stdout), stdout_next, stderr, stderr_next FROM mesh_exec_output(:seq, 1988895);
-- a limit inside a UTF-8 sequence stops before it; the next call starts with it
SELECT exec_id AS utf FROM mesh_exec('out-1', ARRAY['printf', 'xé€z']) \gset
SELECT stdout, stdout_next FROM mesh_exec_output(:utf, 0, 0, 2);
SELECT stdout, stdout_next FROM mesh_exec_output(:utf, 1, 0, 3);
SELECT stdout, stdout_next FROM mesh_exec_output(:utf, 3, 0, 100);

-- bad input: a clear error each
SELECT * FROM regress.try('SELECT * FROM mesh_exec_output(999999999)');
SELECT * FROM regress.try('SELECT * FROM mesh_exec_output(NULL)');
SELECT state, replace(message, :'utf', '<id>') AS message, hint
  FROM regress.try(format('SELECT * FROM mesh_exec_output(%s, 8)', :utf));
SELECT state, replace(message, :'utf', '<id>') AS message, hint
  FROM regress.try(format('SELECT * FROM mesh_exec_output(%s, 0, -1)', :utf));
SELECT * FROM regress.try(format('SELECT * FROM mesh_exec_output(%s, 0, 0, 0)', :utf));
SELECT * FROM regress.try(format('SELECT * FROM mesh_exec_output_bytes(%s, ''stdin'')', :utf));

-- storing the output fails (here: the worker may not insert it): the exec's end is still
-- recorded and returned, and the row says none of its output was kept
REVOKE INSERT ON mesh.exec_output FROM mesh_worker;
SELECT exec_id AS lost, exit_code, stdout, stdout_bytes FROM mesh_exec('out-1', ARRAY['echo', 'not stored']) \gset
GRANT INSERT ON mesh.exec_output TO mesh_worker;
SELECT :exit_code AS exit_code, :'stdout' AS stdout, :stdout_bytes AS stdout_bytes;
SELECT status, exit_code, stdout, stdout_bytes, stdout_dropped,
       (SELECT count(*) FROM mesh.exec_output WHERE exec_id = :lost) AS chunks
  FROM mesh.execs WHERE id = :lost;

-- the stored output outlives the workspace
SELECT mesh_release('out-1');
SELECT status, stdout, stdout_next FROM mesh_exec_output(:utf);

-- another harness role (run ownership is on by default): the exec does not exist for it
CREATE ROLE out_other IN ROLE mesh_harness;
GRANT USAGE ON SCHEMA regress TO out_other;
SET ROLE out_other;
SELECT state, replace(message, :'utf', '<id>') AS message
  FROM regress.try(format('SELECT * FROM mesh_exec_output(%s)', :utf));
SELECT count(*) AS chunks_seen FROM mesh.exec_output_chunks WHERE exec_id = :utf;
SELECT count(*) AS streams_seen FROM mesh.exec_output_text WHERE exec_id = :utf;
SELECT * FROM regress.try('SELECT count(*) FROM mesh.exec_output');
RESET ROLE;
REVOKE USAGE ON SCHEMA regress FROM out_other;
DROP ROLE out_other;

-- retention: the reaper removes output older than mesh.exec_output_retention
-- (a week by default); the rows then say it was all dropped
UPDATE mesh.execs SET finished_at = finished_at - interval '8 days' WHERE id = :raw;
SELECT action, detail FROM mesh.sweep() WHERE action = 'output_expired';
SELECT stdout_bytes, stdout_dropped, stderr_bytes, stderr_dropped,
       (SELECT count(*) FROM mesh.exec_output WHERE exec_id = :raw) AS chunks
  FROM mesh.execs WHERE id = :raw;
SELECT stdout, stdout_next, stderr_next FROM mesh_exec_output(:raw);
SELECT count(*) > 0 AS others_kept FROM mesh.exec_output WHERE exec_id = :seq;
