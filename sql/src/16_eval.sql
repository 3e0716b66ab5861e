------------------------------------------------------------------------------
-- mesh_eval: evaluate a snippet in an isolate (a backend declaring "eval").
------------------------------------------------------------------------------
-- The evaluation is an exec of the run (its row in mesh.execs first, budgets
-- charged, cancellable, ownership enforced) whose argv is [language, code] and
-- whose stdin is the input as JSON; the worker sends it only to a backend that
-- declares eval, and refuses it before any backend call otherwise.
CREATE FUNCTION mesh.eval_call(run_id text, argv text[], dir text DEFAULT NULL,
                               stdin bytea DEFAULT NULL, timeout interval DEFAULT NULL,
                               env jsonb DEFAULT NULL)
RETURNS TABLE (exit_code integer, stdout text, stderr text, status text,
               truncated boolean, exec_id bigint,
               stdout_bytes bigint, stderr_bytes bigint)
    AS 'MODULE_PATHNAME', 'mesh_eval_call' LANGUAGE C ROWS 1;

-- The value (JSON), the console output, the error (NULL when it returned a
-- value), the time the isolate took and the exec's status and id.
CREATE FUNCTION @extschema@.mesh_eval(run_id text, language text, code text,
                                      input jsonb DEFAULT NULL, timeout interval DEFAULT NULL)
RETURNS TABLE (value jsonb, stdout text, error text, duration_ms double precision,
               status text, exec_id bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    r record;
    doc jsonb;
BEGIN
    PERFORM mesh.require_args('mesh_eval', ARRAY['run_id', 'language', 'code'],
                              ARRAY[mesh_eval.run_id IS NULL, mesh_eval.language IS NULL, mesh_eval.code IS NULL]);
    IF language <> 'javascript' THEN
        RAISE EXCEPTION 'mesh_eval: language "%" is not offered', language
              USING ERRCODE = 'feature_not_supported', HINT = 'The isolate backend evaluates javascript only.';
    END IF;
    SELECT * INTO r FROM mesh.eval_call(run_id, ARRAY[language, code], NULL,
                                        CASE WHEN input IS NULL THEN NULL ELSE convert_to(input::text, 'UTF8') END,
                                        timeout, NULL);
    -- an answer over the exec's output bound is stored cut (mesh.execs keeps it): say so
    BEGIN
        doc := r.stdout::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        doc := jsonb_build_object('error', format('evaluation stopped: output over the bound of %s bytes (the answer is kept, cut, in mesh.execs)',
                                                  length(r.stdout)));
    END;
    value := doc->'value';
    stdout := doc->>'stdout';
    error := doc->>'error';
    duration_ms := (doc->>'duration_ms')::double precision;
    status := r.status;
    exec_id := r.exec_id;
    RETURN NEXT;
END
$$;

-- The embedded isolate host (mesh.embedded_isolated, src/isolated_launcher.c) as the backend
-- "isolate", after every other in catalog order: an unpinned agent's runs keep the shell
-- backend, and an agent pinned to "isolate" evaluates there.
INSERT INTO mesh.backends (name, driver, enabled, catalog_order, config)
SELECT 'isolate', 'isolate', true, 1000, '{"embedded": true}'
 WHERE coalesce(current_setting('mesh.embedded_isolated', true), 'off') = 'on';
