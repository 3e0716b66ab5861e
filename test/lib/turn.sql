-- test/lib/turn.sql: the check a harness turn makes on every answer it gets
-- (test/lib/turn.pgbench, test/e2e/load.t, bench/load.sh).  Raising ends the
-- pgbench client, so a single wrong answer fails the run.
CREATE OR REPLACE FUNCTION mesh_turn_expect(got text, want text, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF got IS DISTINCT FROM want THEN
    RAISE EXCEPTION 'harness turn: % answered %, expected %', what, quote_nullable(got), quote_nullable(want)
      USING ERRCODE = 'data_exception';
  END IF;
  RETURN true;
END $$;
