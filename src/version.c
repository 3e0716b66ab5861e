/*-------------------------------------------------------------------------
 *
 * version.c
 *	  The library serves one version of the extension's SQL: the one the
 *	  control file installs by default (MESH_EXEC_VERSION, from the
 *	  Makefile).  After the package is upgraded and the server restarted,
 *	  the database still holds the SQL of the version it was created with
 *	  until ALTER EXTENSION mesh_exec UPDATE runs; calling its functions,
 *	  whose names, arguments and rows the library no longer matches, would
 *	  be undefined behaviour.  Every harness call and every worker
 *	  transaction checks first and refuses with an error saying what to do.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "version.h"

#ifndef MESH_EXEC_VERSION
#error "MESH_EXEC_VERSION is set by the Makefile from mesh_exec.control"
#endif

/* The transaction whose check passed: one catalog read per transaction at most. */
static LocalTransactionId checked_lxid = InvalidLocalTransactionId;

/*
 * extversion of the extension's pg_extension row (palloc'd), or NULL when
 * the row is gone.
 */
static char *
installed_version(Oid extension_oid)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extension_oid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * Raise unless the current database's mesh_exec SQL is this library's
 * version.  Needs a transaction.  Quiet where the extension is not installed
 * (callers then fail on their own, naming what is missing) and while an
 * extension script runs (CREATE or ALTER EXTENSION is what fixes a mismatch).
 */
void
mesh_require_sql_version(void)
{
	Oid			extension_oid;
	char	   *version;

	if (MyProc->lxid == checked_lxid || creating_extension)
		return;
	extension_oid = get_extension_oid("mesh_exec", true);
	if (!OidIsValid(extension_oid))
		return;
	version = installed_version(extension_oid);
	if (version == NULL || strcmp(version, MESH_EXEC_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("mesh_exec's library is version %s but database \"%s\" holds its SQL at version %s",
						MESH_EXEC_VERSION, get_database_name(MyDatabaseId),
						version ? version : "(unknown)"),
				 errhint("Run ALTER EXTENSION mesh_exec UPDATE in that database; "
						 "until then no workspace call is served there.")));
	checked_lxid = MyProc->lxid;
}
