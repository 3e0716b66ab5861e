-- setup: the extension is installed and the embedded backend is registered.
-- The files run in an existing database (make installcheck: the one mesh.database names), whose
-- server may have its own defaults: they get the settings pg_regress gives a database it
-- creates, and NOTICEs shown, from the next file on.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET lc_messages = %L', current_database(), 'C');
    EXECUTE format('ALTER DATABASE %I SET lc_monetary = %L', current_database(), 'C');
    EXECUTE format('ALTER DATABASE %I SET lc_numeric = %L', current_database(), 'C');
    EXECUTE format('ALTER DATABASE %I SET lc_time = %L', current_database(), 'C');
    EXECUTE format('ALTER DATABASE %I SET bytea_output = %L', current_database(), 'hex');
    EXECUTE format('ALTER DATABASE %I SET timezone_abbreviations = %L', current_database(), 'Default');
    EXECUTE format('ALTER DATABASE %I SET client_min_messages = %L', current_database(), 'notice');
END
$$;
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
