-- durability: a caller's ROLLBACK never erases a workspace or an exec that happened.
\set ON_ERROR_STOP 0
BEGIN;
SELECT status FROM mesh_acquire('durable-1', 'agent-d', 'dave');
SELECT stdout FROM mesh_exec('durable-1', ARRAY['sh', '-c', 'echo ran > proof.txt; echo ran']);
ROLLBACK;
-- the worker committed them in its own transactions
SELECT status, backend_kind IS NOT NULL AS has_backend FROM mesh.workspaces WHERE run_id = 'durable-1';
SELECT argv, status FROM mesh.execs WHERE run_id = 'durable-1';
-- and the sandbox really has the file
SELECT convert_from(mesh_read_file('durable-1', 'proof.txt'), 'UTF8') AS proof;
-- an error in the caller's transaction after the exec does not erase it either
BEGIN;
SELECT exit_code FROM mesh_exec('durable-1', ARRAY['true']);
SELECT 1 / 0;
ROLLBACK;
SELECT count(*) AS execs FROM mesh.execs WHERE run_id = 'durable-1';
-- a caller holding a lock the worker needs fails fast instead of hanging
BEGIN;
LOCK TABLE mesh.workspaces IN ACCESS EXCLUSIVE MODE;
SELECT * FROM mesh_exec('durable-1', ARRAY['true']);
ROLLBACK;
SELECT mesh_release('durable-1');
