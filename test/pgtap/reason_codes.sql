-- test/pgtap/reason_codes.sql: what the worker decides from a workspace's reason, it decides
-- from status_reason_code, never from the sentence in status_reason (which people read, and
-- an operator may edit).  The rows the worker reads are committed, so this file cleans up
-- after itself instead of running in a rolled-back transaction.
SELECT plan(4);

INSERT INTO mesh.workspaces (run_id, agent_id, created_by_actor_id, status, status_reason_code, status_reason)
VALUES ('pgtap-reason-budget', 'pgtap-reason', 'pgtap', 'failed', 'budget_exhausted', 'stopped: see the ticket'),
       ('pgtap-reason-words', 'pgtap-reason', 'pgtap', 'failed', 'acquire_failed',
        'budget exhausted: stopped after 1.0 compute-seconds (the run''s budget is 1.0)');

SELECT throws_ok($$SELECT * FROM mesh_exec('pgtap-reason-budget', ARRAY['true'])$$, '53400',
                 'the workspace of run "pgtap-reason-budget" has stopped: stopped: see the ticket',
                 'a run stopped by its budget is refused as over its limit, whatever its sentence says');
SELECT throws_ok($$SELECT mesh_read_file('pgtap-reason-budget', 'x')$$, '53400', NULL,
                 'for every operation');
SELECT throws_ok($$SELECT * FROM mesh_exec('pgtap-reason-words', ARRAY['true'])$$, '55000', NULL,
                 'a sentence that reads like a budget stop does not make one');
SELECT is((SELECT runs_stopped_by_budget FROM mesh.spend_by_agent WHERE agent_id = 'pgtap-reason'), 1::bigint,
          'spend_by_agent counts runs stopped by their budget by the code');

DELETE FROM mesh.workspaces WHERE agent_id = 'pgtap-reason';
SELECT * FROM finish();
