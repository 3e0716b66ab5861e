------------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing; the harness calls the API and reads views;
-- the admin configures.  Credentials are readable by neither.
------------------------------------------------------------------------------
REVOKE ALL ON ALL TABLES IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA mesh FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_acquire(text, text, text, text, text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_read_file(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_write_file(text, text, bytea, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_release(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_output(bigint, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_output_bytes(bigint, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_start(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_wait(bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_kill(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_extend(bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_exec_channel(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot_share(bigint, regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_snapshot_unshare(bigint, regrole) FROM PUBLIC;

GRANT USAGE ON SCHEMA mesh TO mesh_harness, mesh_admin, mesh_worker;
-- a monitoring role reads the statistics views (sql/src/21_stats.sql), nothing else
GRANT USAGE ON SCHEMA mesh TO pg_monitor;
-- the workers read and write mesh's rows (no DELETE, no DDL), call its functions
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA mesh TO mesh_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mesh TO mesh_worker;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mesh TO mesh_worker;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_acquire(text, text, text, text, text, text, bigint) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec(text, text[], text, bytea, interval, jsonb) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_read_file(text, text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_write_file(text, text, bytea, integer) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_release(text, text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_snapshot(text) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_start(text, text[], text, bytea, interval, jsonb),
                          @extschema@.mesh_exec_wait(bigint, interval),
                          @extschema@.mesh_exec_kill(bigint, text),
                          @extschema@.mesh_exec_extend(bigint, interval)
      TO mesh_harness, mesh_admin;
-- stored output: read through views that show only the runs the role may drive
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_output(bigint, bigint, bigint, bigint),
                          @extschema@.mesh_exec_output_bytes(bigint, text, bigint, bigint),
                          mesh.readable_exec(bigint),
                          mesh.output_slice(mesh.exec_log, text, bigint, bigint, boolean),
                          mesh.output_text(bytea)
      TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.exec_output_chunks, mesh.exec_output_text TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.live_workspaces, mesh.run_workspaces, mesh.exec_log, mesh.spend_by_run TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.may_drive(regrole, oid) TO mesh_harness, mesh_admin;
-- the one NULL check, which the harness's own functions call as their caller
GRANT EXECUTE ON FUNCTION mesh.require_args(text, text[], boolean[]) TO mesh_harness, mesh_admin;
-- run ownership beyond runs: progress channels, snapshots and their shares
GRANT EXECUTE ON FUNCTION @extschema@.mesh_exec_channel(bigint),
                          mesh.exec_channel_name(bigint, text),
                          @extschema@.mesh_snapshot_share(bigint, regrole),
                          @extschema@.mesh_snapshot_unshare(bigint, regrole),
                          mesh.snapshot_owned(bigint, text),
                          mesh.snapshot_usable(bigint, regrole, oid),
                          mesh.raise_unknown_snapshot(bigint)
      TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.project_snapshots TO mesh_harness;
GRANT SELECT, INSERT, DELETE ON mesh.snapshot_shares_owned TO mesh_harness, mesh_admin;
GRANT SELECT ON mesh.agent_access TO mesh_admin;
GRANT SELECT ON mesh.spend_by_agent, mesh.run_limits, mesh.settings, mesh.run_budgets, mesh.tier_climbs TO mesh_admin;
GRANT SELECT ON mesh.secret_catalog, mesh.environments, mesh.grants TO mesh_admin;
GRANT SELECT ON mesh.backend_catalog, mesh.event_log TO mesh_admin;
-- the catalog's capabilities column: its readers call the function
GRANT EXECUTE ON FUNCTION mesh.driver_capabilities(text, jsonb) TO mesh_admin;
GRANT SELECT ON mesh.backends, mesh.agents, mesh.workspaces, mesh.execs, mesh.events TO mesh_admin;
GRANT SELECT ON mesh.snapshots, mesh.project_snapshots TO mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.backend_add(text, text, jsonb, boolean, integer, mesh.size_tier),
                          mesh.backend_configure(text, jsonb),
                          mesh.backend_enable(text),
                          mesh.backend_disable(text),
                          mesh.backend_set_credential(text, text),
                          mesh.backend_set_order(text, integer),
                          mesh.backend_set_max_size(text, mesh.size_tier),
                          mesh.agent_set(text, text, mesh.size_tier),
                          mesh.agent_set_budget(text, double precision, integer, interval),
                          mesh.run_set_budget(text, double precision, interval),
                          mesh.set_policy(interval, interval, double precision, boolean, integer, integer),
                          mesh.drivers(),
                          mesh.sweep(),
                          mesh.call_stages(),
                          mesh.call_stages_reset(),
                          mesh.secret_set(text, text, text),
                          mesh.secret_delete(text, text),
                          mesh.environment_set(text, jsonb),
                          mesh.grant_revoke(text, text, text, text),
                          mesh.run_grants(text),
                          mesh.egress_policy(),
                          mesh.set_egress_policy(jsonb),
                          mesh.run_network(text),
                          mesh.snapshot_retire(bigint),
                          mesh.agent_grant(text, regrole),
                          mesh.agent_revoke(text, regrole)
      TO mesh_admin;
-- resumable conversations (sql/src/15_lifecycle.sql)
REVOKE ALL ON FUNCTION @extschema@.mesh_resume(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_resume(text, text) TO mesh_harness, mesh_admin;
REVOKE ALL ON FUNCTION @extschema@.mesh_extend(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_extend(text, interval) TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.set_lifecycle(interval, interval) TO mesh_admin;

-- Repositories (issue 31): admins name providers, set their credential (write-only), register
-- repositories and grant them to runs; nobody but the workers reads a credential or a token.
GRANT SELECT ON mesh.repository_providers, mesh.repositories TO mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.repository_provider_set(text, text, text, text, text, text),
                          mesh.repository_provider_set_credential(text, text),
                          mesh.repository_register(text, text, jsonb),
                          mesh.repository_grant(text, text, jsonb),
                          mesh.run_repository_tokens(text)
      TO mesh_admin;


-- mesh_eval (sql/src/16_eval.sql)
REVOKE ALL ON FUNCTION mesh.eval_call(text, text[], text, bytea, interval, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.mesh_eval(text, text, text, jsonb, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mesh.eval_call(text, text[], text, bytea, interval, jsonb),
                          @extschema@.mesh_eval(text, text, text, jsonb, interval) TO mesh_harness, mesh_admin;
-- checking out a repository (sql/src/18_checkout.sql): the harness checks out, the admin sets a clone base
REVOKE ALL ON FUNCTION @extschema@.mesh_checkout(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.mesh_checkout(text, text, text),
                          mesh.checkout_plan(text, text),
                          mesh.checkout_credential_helper() TO mesh_harness, mesh_admin;
GRANT EXECUTE ON FUNCTION mesh.repository_provider_set_git_url(text, text) TO mesh_admin;
