-- cancel: statement_timeout aborts the wait, kills the command, records 'cancelled'.
\set ON_ERROR_STOP 0
SELECT status FROM mesh_acquire('cancel-1', 'agent-c', 'erin');
SELECT exit_code FROM mesh_exec('cancel-1', ARRAY['true']);
SET statement_timeout = '500ms';
SELECT * FROM mesh_exec('cancel-1', ARRAY['sh', '-c', 'sleep 30; echo never > late.txt']);
RESET statement_timeout;
-- the worker records the cancellation in its own transaction; wait for it
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM mesh.execs WHERE run_id = 'cancel-1' AND status = 'running');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT argv[1:2], status, error FROM mesh.execs WHERE run_id = 'cancel-1' ORDER BY id;
-- the command is gone from the sandbox: nothing of it is still running
SELECT stdout FROM mesh_exec('cancel-1', ARRAY['sh', '-c', 'ps -eo args | grep -c "[s]leep 30"']);
SELECT stdout, exit_code FROM mesh_exec('cancel-1', ARRAY['sh', '-c', 'ls late.txt 2>&1']);
SELECT mesh_release('cancel-1');
