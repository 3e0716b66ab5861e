-- test/pgtap/handoff_leaks.sql: a backend that makes many mesh calls that fail -- refused by
-- the caller's own checks before or while the request is built, or answered with an error by
-- the worker -- keeps its memory and its shared memory: nothing of a failed call outlives it.
-- Watched two ways: the backend's resident set (/proc/self/status: malloc'd memory, which
-- memory contexts do not see) and its memory contexts (pg_backend_memory_contexts).  Every
-- call also creates a dynamic shared memory segment: a leaked one would exhaust the server's
-- segment slots long before the loop ends, and the loop would fail.
SELECT plan(6);

CREATE FUNCTION pg_temp.rss_kb() RETURNS bigint LANGUAGE sql AS
$$ SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmRSS:\s+(\d+)'))[1]::bigint $$;
CREATE FUNCTION pg_temp.context_bytes() RETURNS bigint LANGUAGE sql AS
$$ SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts $$;

-- N rounds of failing calls, every error caught; returns how many failed as expected.
-- Long identifiers make each round's request large, so a leak would show in megabytes.
CREATE FUNCTION pg_temp.failing_calls(n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  id text := 'pgtap-leaks-' || repeat('x', 200);
  failed int := 0;
BEGIN
  FOR i IN 1..n LOOP
    BEGIN   -- caller: refused after the request was begun
      PERFORM mesh_acquire(id, id, id, id, id);
    EXCEPTION WHEN invalid_parameter_value THEN failed := failed + 1;
    END;
    BEGIN   -- caller: argv refused halfway through
      PERFORM * FROM mesh_exec(id, ARRAY[id, id, NULL]);
    EXCEPTION WHEN null_value_not_allowed THEN failed := failed + 1;
    END;
    BEGIN   -- caller: env refused after argv was added
      PERFORM * FROM mesh_exec(id, ARRAY[id, id], NULL, NULL, NULL, jsonb_build_object(id, 1));
    EXCEPTION WHEN invalid_parameter_value THEN failed := failed + 1;
    END;
    BEGIN   -- worker: answered with an error (the run is declared for another agent)
      PERFORM mesh_acquire(current_setting('pgtap_leaks.run'), 'pgtap-other-agent', id);
    EXCEPTION WHEN unique_violation THEN failed := failed + 1;
    END;
    BEGIN   -- worker: answered with an error (no such run), with a stdin blob
      PERFORM * FROM mesh_exec(id, ARRAY[id, id], NULL, convert_to(id, 'UTF8'), NULL, jsonb_build_object('A', id));
    EXCEPTION WHEN undefined_object OR no_data_found OR object_not_in_prerequisite_state THEN failed := failed + 1;
    END;
  END LOOP;
  RETURN failed;
END $$;

SELECT 'pgtap-leaks-' || pg_backend_pid() || '-' || txid_current() AS run \gset
SELECT set_config('pgtap_leaks.run', :'run', false);
SELECT is((SELECT status::text FROM mesh_acquire(:'run', 'pgtap-leaks', 'pgtap')), 'pending',
          'a run is declared');
-- warm up: plans, caches and the allocator's arenas settle
SELECT is(pg_temp.failing_calls(200), 1000, 'every failing call of the warm-up fails as expected');
SELECT pg_temp.rss_kb() AS rss_before, pg_temp.context_bytes() AS contexts_before \gset
SELECT is(pg_temp.failing_calls(3000), 15000, 'every one of 15000 failing calls fails as expected');
SELECT pg_temp.rss_kb() AS rss_after, pg_temp.context_bytes() AS contexts_after \gset

SELECT cmp_ok((:rss_after - :rss_before)::bigint, '<', 2048::bigint,
              'the backend''s resident set grew by less than 2 MB over 15000 failed calls');
SELECT cmp_ok((:contexts_after - :contexts_before)::bigint, '<', 1048576::bigint,
              'its memory contexts grew by less than 1 MB');
SELECT is(mesh_release(:'run', 'pgtap done'), 'never materialized',
          'the run is still served and released');
SELECT * FROM finish();
