------------------------------------------------------------------------------
-- Background commands: started, followed by a worker while they run (their
-- output stored as it comes, a NOTIFY on mesh_exec_<id> for each step),
-- waited for, signalled.
------------------------------------------------------------------------------
CREATE FUNCTION @extschema@.mesh_exec_start(run_id text, argv text[], dir text DEFAULT NULL,
                                            stdin bytea DEFAULT NULL, timeout interval DEFAULT NULL,
                                            env jsonb DEFAULT NULL)
RETURNS bigint
    AS 'MODULE_PATHNAME', 'mesh_exec_start' LANGUAGE C;

-- The row mesh_exec returns, once the command has ended; with a timeout that passes first, the
-- row as it is (status running).
CREATE FUNCTION @extschema@.mesh_exec_wait(exec_id bigint, timeout interval DEFAULT NULL)
RETURNS TABLE (exit_code integer, stdout text, stderr text, status text,
               truncated boolean, exec_id bigint,
               stdout_bytes bigint, stderr_bytes bigint)
    AS 'MODULE_PATHNAME', 'mesh_exec_wait' LANGUAGE C ROWS 1;

-- Signal a running command's whole process tree; false (with a notice) when it already ended.
CREATE FUNCTION @extschema@.mesh_exec_kill(exec_id bigint, signal text DEFAULT 'TERM')
RETURNS boolean
    AS 'MODULE_PATHNAME', 'mesh_exec_kill' LANGUAGE C;

-- Move a running command's deadline (foreground or background) later by "by"; its new
-- deadline.  Refused before any backend call when the backend does not declare
-- extend_timeout (0A000), or past 7 days, the run's budget or its lifetime bound (53400);
-- recorded (mesh.execs.timeout_ms, an exec_extended event).
CREATE FUNCTION @extschema@.mesh_exec_extend(exec_id bigint, by interval)
RETURNS timestamptz
    AS 'MODULE_PATHNAME', 'mesh_exec_extend' LANGUAGE C;

-- The channel to LISTEN on for a command's progress and end: a name only the
-- roles that may read the exec learn (another role's exec does not exist).
CREATE FUNCTION @extschema@.mesh_exec_channel(exec_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
BEGIN
    IF exec_id IS NULL THEN
        RAISE EXCEPTION 'mesh_exec_channel: exec_id must not be NULL'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Pass the id mesh_exec_start returned.';
    END IF;
    RETURN (mesh.readable_exec(exec_id)).channel;
END
$$;
