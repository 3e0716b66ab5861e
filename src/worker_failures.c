/*-------------------------------------------------------------------------
 *
 * worker_failures.c
 *	  How a backend's failure reaches a harness: the SQLSTATE and the hint
 *	  for each failure class a driver reports (backend.h), so the error a
 *	  caller sees never depends on which backend produced it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "worker_failures.h"

/* The SQLSTATE a harness sees for a backend failure, whatever the backend. */
int
failure_sqlerrcode(MeshFailure failure)
{
	switch (failure)
	{
		case MESH_FAIL_NOT_FOUND:
			return ERRCODE_UNDEFINED_FILE;
		case MESH_FAIL_PATH_REFUSED:
			return ERRCODE_INSUFFICIENT_PRIVILEGE;
		case MESH_FAIL_TOO_LARGE:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case MESH_FAIL_BAD_REQUEST:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case MESH_FAIL_NOT_RUNNING:
			return ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		case MESH_FAIL_NO_RESOURCES:
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case MESH_FAIL_UNAVAILABLE:
			return ERRCODE_CONNECTION_FAILURE;
		case MESH_FAIL_PERMISSION:
			return ERRCODE_INSUFFICIENT_PRIVILEGE;
		case MESH_FAIL_NAME_TOO_LONG:
			return ERRCODE_STRING_DATA_RIGHT_TRUNCATION;
		case MESH_FAIL_ARGS_TOO_LONG:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case MESH_FAIL_RELEASE_INCOMPLETE:
			return ERRCODE_IO_ERROR;
		case MESH_FAIL_PROTOCOL:
			return ERRCODE_PROTOCOL_VIOLATION;
		default:
			return ERRCODE_INTERNAL_ERROR;
	}
}

const char *
failure_hint(MeshFailure failure)
{
	switch (failure)
	{
		case MESH_FAIL_PATH_REFUSED:
			return "Paths are relative to the workspace root, or absolute inside /workspace; they may not leave it.";
		case MESH_FAIL_UNAVAILABLE:
			return "Check that the backend is running and reachable; see mesh.backend_catalog.";
		case MESH_FAIL_NO_RESOURCES:
			return "The backend has no room for this: prepare its host as the message says, or release workspaces that are done (mesh-sandboxd at capacity: raise its open-files limit; a mesh worker without descriptors: raise the server's, or end background commands); then retry.";
		case MESH_FAIL_TOO_LARGE:
			return "See mesh.max_file_size and the backend's limits.";
		case MESH_FAIL_PERMISSION:
			return "The workspace's own file modes apply; change them with mesh_exec (chmod), or write the file again.";
		case MESH_FAIL_NAME_TOO_LONG:
			return "Each name in a path may have at most 255 bytes, the whole path at most 4095.";
		case MESH_FAIL_PROTOCOL:
			return "The backend answered in a way its driver does not understand: check that its version matches this extension's (mesh.backend_catalog names it).";
		case MESH_FAIL_ARGS_TOO_LONG:
			return "One argument may have at most 128 kB and all arguments and environment together about 2 MB; pass large data as mesh_exec's stdin or in a file (mesh_write_file).";
		default:
			return NULL;
	}
}
