------------------------------------------------------------------------------
-- Internal functions (C)
------------------------------------------------------------------------------
CREATE FUNCTION mesh.validate_backend_config(driver text, config jsonb) RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_validate_backend_config' LANGUAGE C STRICT;
CREATE FUNCTION mesh.drivers() RETURNS text[]
    AS 'MODULE_PATHNAME', 'mesh_drivers' LANGUAGE C STRICT;
-- What a driver declares for a backend of this config (no backend call): the capabilities
-- JSON a workspace row records; NULL for a driver this build does not have.
CREATE FUNCTION mesh.driver_capabilities(driver text, config jsonb) RETURNS jsonb
    AS 'MODULE_PATHNAME', 'mesh_driver_capabilities' LANGUAGE C STRICT STABLE;
-- Run a reaper sweep now; returns what it did.
CREATE FUNCTION mesh.sweep() RETURNS TABLE (action text, run_id text, backend text, detail text)
    AS 'MODULE_PATHNAME', 'mesh_sweep' LANGUAGE C;
-- Once the calling transaction commits, the reaper reclaims the retired snapshots no live
-- workspace stands on (called where a snapshot is retired or a workspace on one released).
CREATE FUNCTION mesh.snapshot_reclaim_soon() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_snapshot_reclaim_soon' LANGUAGE C VOLATILE;

-- Where the time of the calls answered since the server started (or the last reset) went:
-- per operation and stage (handoff, worker_txn, http, reply, total), cumulative; every
-- stage row of an operation carries the operation's call count.
CREATE FUNCTION mesh.call_stages()
RETURNS TABLE (op text, stage text, calls bigint, total_ms double precision)
    AS 'MODULE_PATHNAME', 'mesh_call_stages' LANGUAGE C VOLATILE;
CREATE FUNCTION mesh.call_stages_reset() RETURNS void
    AS 'MODULE_PATHNAME', 'mesh_call_stages_reset' LANGUAGE C VOLATILE;
