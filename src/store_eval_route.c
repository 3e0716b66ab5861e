/*-------------------------------------------------------------------------
 *
 * store_eval_route.c
 *	  Routing an evaluation by capability, at a run's materialization.
 *
 * A run's first call picks its backend (mesh.workspace_choose_backend: the
 * agent's pin, else the first enabled backend in catalog order).  When
 * that call is an evaluation (mesh_eval) and the picked backend does not
 * declare eval, the run goes instead to the first enabled backend, in
 * catalog order, whose driver declares it: a run that only evaluates is
 * never given a shell sandbox, and nothing is materialized for it beyond
 * what the isolate backend "acquires" (a health check).  A run is bound to
 * one backend from then on: a run that evaluated cannot run commands, and
 * one that ran a command cannot evaluate unless its backend declares both
 * (each is refused by capability before any backend call).  A harness that
 * needs both uses two runs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"
#include "store.h"
#include "txn.h"

static const char eval_backends_sql[] =
"SELECT b.name, b.driver, b.config::text AS config, c.credential, "
"       least($1::mesh.size_tier, b.max_size)::text AS size "
"  FROM mesh.backends b LEFT JOIN mesh.backend_credentials c ON c.backend = b.name "
" WHERE b.enabled ORDER BY b.catalog_order, b.name";

/*
 * NEEDS "eval" on a backend (BE, CAPS) that lacks it: move WS, BE and CAPS
 * to the first enabled backend declaring eval.  Returns true when it did;
 * false leaves everything as it was (the caller's refusal then says why).
 * Runs inside the materialization's transaction.
 */
bool
store_route_eval(MeshWorkspace *ws, MeshBackend *be, MeshCapabilities *caps, const char *needs)
{
	MeshParam	size;
	MeshRows   *rows;

	if (needs == NULL || strcmp(needs, "eval") != 0 || caps->eval)
		return false;
	size = mesh_text_param(ws->size);
	rows = mesh_sql(eval_backends_sql, 1, &size);
	for (uint64 i = 0; i < rows->n; i++)
	{
		MeshBackend candidate;
		MeshCapabilities declared;

		if (!mesh_backend_make(mesh_col_text(rows, i, "name"), mesh_col_text(rows, i, "driver"),
							   mesh_col_text(rows, i, "config"), mesh_col_text(rows, i, "credential"),
							   &candidate))
			continue;
		if (candidate.driver->needs_credential(candidate.config) && candidate.credential == NULL)
		{
			json_decref(candidate.config);
			continue;
		}
		candidate.driver->declared_capabilities(&candidate, &declared);
		if (!declared.eval)
		{
			json_decref(candidate.config);
			continue;
		}
		ereport(LOG,
				(errmsg("mesh: run \"%s\" evaluates on backend \"%s\": its agent's backend \"%s\" does not declare eval",
						ws->run_id, candidate.name, ws->backend_kind)));
		json_decref(be->config);
		*be = candidate;
		*caps = declared;
		ws->backend_kind = mesh_col_text(rows, i, "name");
		ws->driver = mesh_col_text(rows, i, "driver");
		ws->config = mesh_col_text(rows, i, "config");
		ws->credential = mesh_col_text(rows, i, "credential");
		ws->size = mesh_col_text(rows, i, "size");
		return true;
	}
	return false;
}
