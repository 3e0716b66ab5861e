-- setup: the extension is installed and the embedded backend is registered.
SELECT extname, extversion FROM pg_extension WHERE extname = 'mesh_exec';
SELECT name, driver, enabled, catalog_order, config, max_size, has_credential
  FROM mesh.backend_catalog ORDER BY name;
SELECT mesh.drivers();
-- the five API functions resolve with the default search_path
SELECT proname FROM pg_proc
 WHERE proname IN ('mesh_acquire', 'mesh_exec', 'mesh_read_file', 'mesh_write_file', 'mesh_release')
   AND pronamespace = 'public'::regnamespace ORDER BY proname;
-- the worker pool is running
SELECT count(*) >= 1 AS workers_running FROM pg_stat_activity WHERE backend_type = 'mesh worker';
-- try(sql): what the later tests use to show an error's SQLSTATE, message and hint
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS regress;
RESET client_min_messages;
CREATE OR REPLACE FUNCTION regress.try(sql text) RETURNS TABLE (state text, message text, hint text)
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN QUERY SELECT 'ok'::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
  RETURN NEXT;
END $$;
