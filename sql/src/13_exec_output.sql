------------------------------------------------------------------------------
-- Output stored whole: every exec's stdout and stderr as the command wrote
-- them (NUL and invalid UTF-8 included, granted secrets redacted), in chunks
-- keyed by their byte offset in the stream, up to mesh.exec_output_limit
-- bytes per stream (beyond it the tail is kept: the exec row's *_dropped say
-- how many leading bytes went).  Kept for mesh.exec_output_retention after
-- the exec ends; the reaper removes older output.
------------------------------------------------------------------------------
CREATE TABLE mesh.exec_output (
    exec_id      bigint NOT NULL REFERENCES mesh.execs (id),
    stream       text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    start_offset bigint NOT NULL CHECK (start_offset >= 0),
    data         bytea COMPRESSION lz4 NOT NULL,  -- pglz costs seconds per 64 MB, lz4 a fraction
    PRIMARY KEY (exec_id, stream, start_offset)
);
-- the execs whose output the reaper may have to expire
CREATE INDEX execs_output_kept_idx ON mesh.execs (finished_at)
    WHERE stdout_dropped < stdout_bytes OR stderr_dropped < stderr_bytes OR stdout <> '' OR stderr <> '';
-- the output of the execs pg_dump keeps (01_catalog.sql)
SELECT pg_catalog.pg_extension_config_dump('mesh.exec_output',
    $$WHERE exec_id IN (SELECT e.id FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id
                         WHERE w.status = 'released' OR (w.status = 'failed' AND w.released_at IS NOT NULL))$$);

-- Bytes as text a person (and a text column) can hold: NUL and invalid UTF-8 become U+FFFD.
CREATE FUNCTION mesh.output_text(data bytea) RETURNS text
    AS 'MODULE_PATHNAME', 'mesh_output_text' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The worker stores an exec's output (what the backend kept, already redacted) a chunk at a
-- time (1 MB, src/exec_output.c), so it never holds a second copy of a whole stream, then
-- the byte counts on the exec's row, in the same transaction.
CREATE FUNCTION mesh.exec_output_chunk(p_exec_id bigint, p_stream text, p_start_offset bigint,
                                       p_data bytea)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    INSERT INTO mesh.exec_output (exec_id, stream, start_offset, data)
    VALUES (p_exec_id, p_stream, p_start_offset, p_data);
$$;
-- How many more bytes of output exec p_exec_id may store: what is left of its run's
-- quota (p_run_quota, counted in mesh.workspaces.output_bytes) and of the install's
-- (p_total_quota, against what mesh.exec_output takes on disk, dead rows and indexes
-- included), with the bound that leaves the least; nothing once its storing stopped.
-- The worker adds the data directory's free-space reserve (src/exec_output.c).
CREATE FUNCTION mesh.exec_output_allowance(p_exec_id bigint, p_run_quota bigint, p_total_quota bigint,
                                           OUT allowed bigint, OUT reason text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    run_left bigint;
    total_left bigint;
    stopped text;
BEGIN
    SELECT p_run_quota - w.output_bytes, e.output_stopped INTO run_left, stopped
      FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id WHERE e.id = p_exec_id;
    IF stopped IS NOT NULL THEN
        allowed := 0;
        reason := stopped;
        RETURN;
    END IF;
    total_left := p_total_quota - pg_catalog.pg_total_relation_size('mesh.exec_output'::regclass);
    IF total_left < run_left THEN
        allowed := greatest(total_left, 0);
        reason := 'install quota';
    ELSE
        allowed := greatest(run_left, 0);
        reason := 'run quota';
    END IF;
END;
$$;

-- What storing an exec's output took from its run's quota (p_stored bytes), and, when
-- storing stopped short (p_stopped: why; p_unstored: the bytes not stored), the exec's
-- marker and, the first time, an output_truncated event.  Returns whether the marker is new.
CREATE FUNCTION mesh.exec_output_account(p_exec_id bigint, p_stored bigint, p_stopped text,
                                         p_unstored bigint)
RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.execs;
    was text;
BEGIN
    IF p_stored > 0 THEN
        UPDATE mesh.workspaces w SET output_bytes = w.output_bytes + p_stored
          FROM mesh.execs x WHERE x.id = p_exec_id AND w.id = x.workspace_id;
    END IF;
    IF p_stopped IS NULL THEN
        RETURN false;
    END IF;
    SELECT x.output_stopped INTO was FROM mesh.execs x WHERE x.id = p_exec_id FOR UPDATE;
    UPDATE mesh.execs x SET output_stopped = coalesce(x.output_stopped, p_stopped),
                            output_unstored = x.output_unstored + coalesce(p_unstored, 0)
     WHERE x.id = p_exec_id RETURNING x.* INTO e;
    IF was IS NOT NULL THEN
        RETURN false;
    END IF;
    INSERT INTO mesh.events (kind, run_id, workspace_id, detail)
    VALUES ('output_truncated', e.run_id, e.workspace_id,
            jsonb_build_object('exec_id', e.id, 'reason', p_stopped, 'unstored_bytes', p_unstored));
    RETURN true;
END;
$$;

-- A command's output stored (src/exec_output.c): each stream's length and leading bytes not
-- kept on the exec's row, with what it took from the run's quota and why it stopped short,
-- in the transaction that stored the chunks.  Returns whether the stop is new.
CREATE FUNCTION mesh.exec_output_counts(p_exec_id bigint, p_stdout_bytes bigint, p_stdout_dropped bigint,
                                        p_stderr_bytes bigint, p_stderr_dropped bigint,
                                        p_stored bigint, p_stopped text, p_unstored bigint)
RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.execs
       SET stdout_bytes = p_stdout_bytes, stdout_dropped = p_stdout_dropped,
           stderr_bytes = p_stderr_bytes, stderr_dropped = p_stderr_dropped
     WHERE id = p_exec_id;
    SELECT mesh.exec_output_account(p_exec_id, p_stored, p_stopped, p_unstored);
$$;

-- A background command's progress: each stream's length as stored (NULL: unchanged, as once
-- its storing stopped) and how far the worker has read it from the backend, in the
-- transaction that stored the new chunks, which are only ever appended: past
-- mesh.exec_output_limit or a quota the stream stops growing (src/store_background.c), so
-- a flood rewrites nothing.  Returns whether the stop is new.
CREATE FUNCTION mesh.exec_output_progress(p_exec_id bigint, p_stdout_bytes bigint, p_stderr_bytes bigint,
                                          p_stdout_read bigint, p_stderr_read bigint,
                                          p_stored bigint, p_stopped text, p_unstored bigint)
RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, mesh, pg_temp AS $$
    UPDATE mesh.execs e
       SET stdout_bytes = coalesce(p_stdout_bytes, e.stdout_bytes),
           stderr_bytes = coalesce(p_stderr_bytes, e.stderr_bytes),
           stdout_read = p_stdout_read, stderr_read = p_stderr_read
     WHERE e.id = p_exec_id;
    SELECT mesh.exec_output_account(p_exec_id, p_stored, p_stopped, p_unstored);
$$;

-- What people see of a stored stream (mesh_exec's clamp, for a background command's end): all
-- of it within p_max bytes, else its first and last kept bytes around the marker
-- "…[mesh: N bytes omitted]…" (src/exec_output.c builds the same for a command's own answer).
CREATE FUNCTION mesh.exec_output_clamped(p_exec_id bigint, p_stream text, p_max integer,
                                         OUT clamped text, OUT truncated boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.execs;
    total bigint;
    first bigint;
    head bigint;
    tail bigint;
    kept bigint;
BEGIN
    SELECT * INTO e FROM mesh.execs WHERE id = p_exec_id;
    total := CASE p_stream WHEN 'stdout' THEN e.stdout_bytes ELSE e.stderr_bytes END;
    first := CASE p_stream WHEN 'stdout' THEN e.stdout_dropped ELSE e.stderr_dropped END;
    kept := total - first;
    IF total <= p_max AND first = 0 THEN
        clamped := mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, 0, total));
        truncated := false;
        RETURN;
    END IF;
    head := least(p_max / 2, kept);
    tail := least(p_max - head, kept - head);
    clamped := mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, first, first + head))
               || E'\n\u2026[mesh: ' || (total - head - tail) || E' bytes omitted]\u2026\n'
               || mesh.output_text(mesh.exec_output_range(p_exec_id, p_stream, total - tail, total));
    truncated := true;
END;
$$;

-- The stored bytes [p_from, p_upto) of one stream.
CREATE FUNCTION mesh.exec_output_range(p_exec_id bigint, p_stream text, p_from bigint, p_upto bigint)
RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
    SELECT coalesce(string_agg(substring(o.data FROM (greatest(p_from - o.start_offset, 0) + 1)::integer
                                         FOR (least(p_upto, o.start_offset + length(o.data))
                                              - greatest(p_from, o.start_offset))::integer),
                               '' ORDER BY o.start_offset), '')
      FROM mesh.exec_output o
     WHERE o.exec_id = p_exec_id AND o.stream = p_stream
       AND o.start_offset < p_upto AND o.start_offset + length(o.data) > p_from;
$$;

-- The reaper: output of execs that ended over p_minutes ago goes, with the clamped copies
-- on their rows, p_batch execs per call (src/reaper.c calls it until a batch comes back
-- short, each call its own transaction).  The only deletion mesh_worker may cause, hence a
-- definer's function, not a DELETE grant.
CREATE FUNCTION mesh.exec_output_expire(p_minutes integer, p_batch integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
    WITH old AS (
        SELECT id FROM mesh.execs
         WHERE (stdout_dropped < stdout_bytes OR stderr_dropped < stderr_bytes OR stdout <> '' OR stderr <> '')
           AND finished_at < now() - make_interval(mins => p_minutes)
         ORDER BY finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED),
    gone AS (DELETE FROM mesh.exec_output o USING old WHERE o.exec_id = old.id),
    marked AS (UPDATE mesh.execs e SET stdout_dropped = e.stdout_bytes, stderr_dropped = e.stderr_bytes,
                                       stdout = NULL, stderr = NULL
                 FROM old WHERE e.id = old.id RETURNING 1)
    SELECT count(*) FROM marked
$$;

-- The stored chunks of the execs the current role may read.
CREATE VIEW mesh.exec_output_chunks AS
SELECT o.exec_id, o.stream, o.start_offset, o.data
  FROM mesh.exec_output o JOIN mesh.execs e ON e.id = o.exec_id
       JOIN mesh.workspaces w ON w.id = e.workspace_id
 WHERE mesh.may_drive(w.owner_role, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user));

-- An exec the current role may read, or the one error for "none" and "not yours".
CREATE FUNCTION mesh.readable_exec(p_exec_id bigint) RETURNS mesh.exec_log
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
BEGIN
    PERFORM mesh.require_args('readable_exec', ARRAY['exec_id'], ARRAY[p_exec_id IS NULL]);
    SELECT l.* INTO e FROM mesh.exec_log l WHERE l.exec_id = p_exec_id;
    IF e.exec_id IS NULL THEN
        RAISE EXCEPTION 'exec % does not exist', coalesce(p_exec_id::text, 'NULL')
            USING ERRCODE = 'undefined_object',
                  HINT = 'Exec ids are those mesh_exec returns and mesh.exec_log lists for runs this role may drive.';
    END IF;
    RETURN e;
END;
$$;

/*
 * Up to p_max bytes of one stream from byte offset p_from (an offset inside
 * the dropped head reads from the first kept byte).  p_whole_chars: do not
 * end inside a UTF-8 sequence the limit cut (the rest comes next time).
 */
CREATE FUNCTION mesh.output_slice(e mesh.exec_log, p_stream text, p_from bigint, p_max bigint,
                                  p_whole_chars boolean, OUT data bytea, OUT next bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    total bigint := CASE p_stream WHEN 'stdout' THEN e.stdout_bytes ELSE e.stderr_bytes END;
    dropped bigint := CASE p_stream WHEN 'stdout' THEN e.stdout_dropped ELSE e.stderr_dropped END;
    first bigint;
    upto bigint;
    b integer;
    seq integer;
BEGIN
    IF p_from < 0 OR p_from > total THEN
        RAISE EXCEPTION 'offset % is outside % of exec % (0 to % bytes)',
                        coalesce(p_from::text, 'NULL'), p_stream, e.exec_id, total
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass 0, or the *_next offset the previous call returned.';
    END IF;
    IF p_max <= 0 THEN
        RAISE EXCEPTION 'max_bytes must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    first := greatest(p_from, dropped);
    upto := least(total, first + p_max);
    SELECT coalesce(string_agg(substring(o.data FROM (greatest(first - o.start_offset, 0) + 1)::integer
                                         FOR (upto - greatest(first, o.start_offset))::integer),
                               '' ORDER BY o.start_offset), '')
      INTO data
      FROM mesh.exec_output_chunks o
     WHERE o.exec_id = e.exec_id AND o.stream = p_stream
       AND o.start_offset < upto AND o.start_offset + length(o.data) > first;
    IF p_whole_chars AND upto < total THEN
        -- back off a UTF-8 sequence the limit cut; its lead byte is among the last three
        FOR k IN 1 .. least(3, length(data)) LOOP
            b := get_byte(data, length(data) - k);
            EXIT WHEN b < 128;
            CONTINUE WHEN b < 192;
            seq := CASE WHEN b >= 240 THEN 4 WHEN b >= 224 THEN 3 ELSE 2 END;
            IF k < seq THEN
                data := substring(data FOR length(data) - k);
            END IF;
            EXIT;
        END LOOP;
    END IF;
    next := first + length(data);
END;
$$;

-- Each stream of each readable exec as text, for people.
CREATE VIEW mesh.exec_output_text AS
SELECT l.exec_id, l.run_id, s.stream, s.bytes, s.dropped,
       (SELECT mesh.output_text(coalesce(string_agg(o.data, '' ORDER BY o.start_offset), ''))
          FROM mesh.exec_output_chunks o WHERE o.exec_id = l.exec_id AND o.stream = s.stream) AS output
  FROM mesh.exec_log l
       CROSS JOIN LATERAL (VALUES ('stdout', l.stdout_bytes, l.stdout_dropped),
                                  ('stderr', l.stderr_bytes, l.stderr_dropped)) s (stream, bytes, dropped);

CREATE FUNCTION @extschema@.mesh_exec_output(exec_id bigint, stdout_from bigint DEFAULT 0,
                                             stderr_from bigint DEFAULT 0,
                                             max_bytes bigint DEFAULT 16777216)
RETURNS TABLE (status text, exit_code integer, stdout text, stderr text,
               stdout_next bigint, stderr_next bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
    o record;
    r record;
BEGIN
    PERFORM mesh.require_args('mesh_exec_output', ARRAY['exec_id', 'stdout_from', 'stderr_from', 'max_bytes'],
        ARRAY[exec_id IS NULL, stdout_from IS NULL, stderr_from IS NULL, max_bytes IS NULL]);
    e := mesh.readable_exec(exec_id);
    o := mesh.output_slice(e, 'stdout', stdout_from, max_bytes, true);
    r := mesh.output_slice(e, 'stderr', stderr_from, max_bytes, true);
    RETURN QUERY SELECT e.status::text, e.exit_code, mesh.output_text(o.data),
                        mesh.output_text(r.data), o.next, r.next;
END;
$$;

-- The stored bytes of one stream as they came, for output that is not text.
CREATE FUNCTION @extschema@.mesh_exec_output_bytes(exec_id bigint, stream text DEFAULT 'stdout',
                                                   from_offset bigint DEFAULT 0,
                                                   max_bytes bigint DEFAULT 16777216)
RETURNS TABLE (data bytea, next_offset bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    e mesh.exec_log;
    s record;
BEGIN
    PERFORM mesh.require_args('mesh_exec_output_bytes', ARRAY['exec_id', 'stream', 'from_offset', 'max_bytes'],
        ARRAY[exec_id IS NULL, stream IS NULL, from_offset IS NULL, max_bytes IS NULL]);
    IF stream NOT IN ('stdout', 'stderr') THEN
        RAISE EXCEPTION 'stream must be % or %, not %', 'stdout', 'stderr', stream
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    e := mesh.readable_exec(exec_id);
    s := mesh.output_slice(e, stream, from_offset, max_bytes, false);
    RETURN QUERY SELECT s.data, s.next;
END;
$$;
