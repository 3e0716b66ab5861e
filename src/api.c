/*-------------------------------------------------------------------------
 *
 * api.c
 *	  The harness API: mesh_acquire, mesh_exec, mesh_read_file,
 *	  mesh_write_file, mesh_release, mesh_snapshot.
 *
 * These run in the caller's backend.  They validate input, hand the request
 * to the run's worker (handoff.c) and wait, cancellably, for the reply.
 * They never write a row themselves: a caller holding an uncommitted row the
 * worker needs would deadlock with it, and a caller's ROLLBACK must not
 * erase what the worker recorded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "mesh_exec.h"

#define MESH_MAX_TIMEOUT_MS (7L * 24 * 3600 * 1000)

/*
 * Input limits, checked before anything is handed off.  Identifiers are
 * indexed (a btree entry must fit a third of a page); paths follow Linux's
 * PATH_MAX and NAME_MAX; one argv element or "NAME=value" must stay below
 * the kernel's MAX_ARG_STRLEN (32 pages, 128 KiB) and all of them together
 * well below ARG_MAX (a quarter of the 8 MiB stack), or execve fails with
 * E2BIG inside the sandbox.
 */
#define MESH_MAX_ID_BYTES 255
#define MESH_MAX_PATH_BYTES 4095
#define MESH_MAX_NAME_BYTES 255
#define MESH_MAX_ARG_BYTES (128 * 1024 - 1)
#define MESH_MAX_ARGS_TOTAL_BYTES (1024 * 1024)

/* json -> mesh.workspaces and mesh.snapshots, prepared once per session */
static SPIPlanPtr row_plan = NULL;
static SPIPlanPtr snapshot_row_plan = NULL;

PG_FUNCTION_INFO_V1(mesh_acquire);
PG_FUNCTION_INFO_V1(mesh_exec);
PG_FUNCTION_INFO_V1(mesh_read_file);
PG_FUNCTION_INFO_V1(mesh_write_file);
PG_FUNCTION_INFO_V1(mesh_release);
PG_FUNCTION_INFO_V1(mesh_snapshot);

/* A required argument: NULL is the caller's error, named, with a hint. */
static void
require_arg(FunctionCallInfo fcinfo, int argno, const char *name, const char *hint)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name),
				 errhint("%s", hint)));
}

/* A required text argument: NULL and empty are the caller's error. */
static char *
required_text(FunctionCallInfo fcinfo, int argno, const char *name)
{
	char	   *value;

	require_arg(fcinfo, argno, name, psprintf("Pass a non-empty text value for %s.", name));
	value = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (value[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name),
				 errhint("Pass a non-empty text value for %s.", name)));
	return value;
}

static char *
optional_text(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/* An identifier longer than the limit is refused naming the argument. */
static char *
check_id_length(char *value, const char *name)
{
	if (value && strlen(value) > MESH_MAX_ID_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is %zu bytes long, the limit is %d", name, strlen(value), MESH_MAX_ID_BYTES),
				 errhint("Use a shorter %s, e.g. a UUID or a hash of a longer name.", name)));
	return value;
}

/* A required identifier: not NULL, not empty, not longer than the limit. */
static char *
required_id(FunctionCallInfo fcinfo, int argno, const char *name)
{
	return check_id_length(required_text(fcinfo, argno, name), name);
}

/*
 * Refuse paths that climb out of the workspace before any backend sees them,
 * so the error is the same whatever the backend; backends confine as well.
 */
static void
check_path(const char *path, const char *what)
{
	const char *p = path;

	if (strlen(path) > MESH_MAX_PATH_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is %zu bytes long, the limit is %d", what, strlen(path), MESH_MAX_PATH_BYTES),
				 errhint("Paths inside the workspace are at most %d bytes (PATH_MAX).", MESH_MAX_PATH_BYTES)));
	while (*p)
	{
		const char *end = strchrnul(p, '/');

		if (end - p > MESH_MAX_NAME_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("%s has a name of %d bytes, the limit is %d",
							what, (int) (end - p), MESH_MAX_NAME_BYTES),
					 errhint("Each name between two \"/\" is at most %d bytes (NAME_MAX).", MESH_MAX_NAME_BYTES)));
		if (end - p == 2 && p[0] == '.' && p[1] == '.')
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("%s \"%s\" is refused: \"..\" may not appear in it", what, path),
					 errhint("Paths are relative to the workspace root, or absolute inside /workspace.")));
		p = *end ? end + 1 : end;
	}
}

/*
 * A bytea argument bounded by a size setting (mesh.max_stdin_size,
 * mesh.max_file_size).  The size comes from the datum's header, so a value
 * stored out of line or compressed is refused before it is fetched: an
 * oversized input costs the caller nothing and never reaches a worker.
 */
static bytea *
bounded_bytea_arg(FunctionCallInfo fcinfo, int argno, const char *name,
				  const char *setting, int limit)
{
	Size		size = toast_raw_datum_size(PG_GETARG_DATUM(argno)) - VARHDRSZ;

	if (size > (Size) limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s of %zu bytes is larger than %s (%d bytes)", name, size, setting, limit),
				 errhint("Send at most %d bytes per call; a superuser can raise %s.", limit, setting)));
	return PG_GETARG_BYTEA_PP(argno);
}

/*
 * A row the worker sent as JSON, as a tuple of TYPE (mesh.workspaces,
 * mesh.snapshots), in the caller's memory.  One plan per type and session
 * (plancache revalidates it).
 */
static Datum
row_from_json(const char *row, const char *type, SPIPlanPtr *plan_cache)
{
	Datum		args[1];
	Oid			types[1] = {TEXTOID};
	Datum		result;

	args[0] = CStringGetTextDatum(row);
	SPI_connect();
	if (*plan_cache == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(psprintf("SELECT (pg_catalog.json_populate_record(NULL::%s, $1::json)).*", type),
									   1, types);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "mesh: could not prepare the %s row conversion", type);
		*plan_cache = plan;
	}
	if (SPI_execute_plan(*plan_cache, args, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "mesh: could not build the %s row", type);
	result = PointerGetDatum(SPI_returntuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc));
	SPI_finish();
	return result;
}

/*
 * mesh_acquire: declare the run's workspace, and with an environment, what
 * the run may see (its grants); with a project or a snapshot, what its
 * /workspace starts from.  No backend is called.
 */
Datum
mesh_acquire(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *agent_id = required_id(fcinfo, 1, "agent_id");
	char	   *actor_id = required_id(fcinfo, 2, "actor_id");
	char	   *parent = check_id_length(optional_text(fcinfo, 3), "parent_run_id");
	char	   *environment = check_id_length(optional_text(fcinfo, 4), "environment");
	char	   *project = check_id_length(optional_text(fcinfo, 5), "project");
	json_t	   *req = json_pack("{s:s,s:s,s:s,s:s?,s:s?,s:s?}", "run_id", run_id, "agent_id", agent_id,
								"actor_id", actor_id, "parent_run_id", parent,
								"environment", environment, "project", project);
	MeshReply	reply;
	Datum		result;

	if (parent && strcmp(parent, run_id) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a run cannot be its own parent"),
				 errhint("Leave parent_run_id NULL for a top-level run.")));

	if (!PG_ARGISNULL(6))
		json_object_set_new(req, "from_snapshot", json_integer(PG_GETARG_INT64(6)));
	mesh_call(MESH_OP_ACQUIRE, run_id, req, NULL, 0, &reply);
	result = row_from_json(json_string_value(json_object_get(reply.doc, "row")), "mesh.workspaces",
						   &row_plan);
	json_decref(reply.doc);
	PG_RETURN_DATUM(result);
}

/* argv: a one-dimensional, non-empty text array without NULLs. */
static json_t *
argv_to_json(FunctionCallInfo fcinfo)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	json_t	   *argv;

	require_arg(fcinfo, 1, "argv", "Pass the command as an array, e.g. ARRAY['ls', '-l'].");
	arr = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argv must be a one-dimensional array"),
				 errhint("Pass the command as an array, e.g. ARRAY['ls', '-l'].")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argv must not be empty"),
				 errhint("Pass the command as an array, e.g. ARRAY['ls', '-l'].")));
	argv = json_array();
	for (int i = 0; i < n; i++)
	{
		char	   *arg;

		if (nulls[i])
		{
			json_decref(argv);
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argv[%d] is NULL", i + 1),
					 errhint("Every element of argv must be a string.")));
		}
		arg = TextDatumGetCString(elems[i]);
		if (strlen(arg) > MESH_MAX_ARG_BYTES)
		{
			json_decref(argv);
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("argv[%d] is %zu bytes long, the limit is %d", i + 1, strlen(arg), MESH_MAX_ARG_BYTES),
					 errhint("The kernel refuses a longer argument; pass large data as stdin or a file (mesh_write_file).")));
		}
		if (i == 0 && arg[0] == '\0')
		{
			json_decref(argv);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argv[1], the program, must not be empty"),
					 errhint("argv[1] names the program to run, e.g. ARRAY['ls', '-l'].")));
		}
		if (json_array_append_new(argv, json_string(arg)) != 0)
		{
			json_decref(argv);
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("argv[%d] is not valid UTF-8", i + 1),
					 errhint("Use a database with UTF8 encoding.")));
		}
	}
	return argv;
}

/* The command's timeout in milliseconds: given, or mesh.exec_timeout. */
static long
timeout_ms_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *iv;
	double		ms;

	if (PG_ARGISNULL(argno))
		return mesh_exec_timeout_ms;
	iv = PG_GETARG_INTERVAL_P(argno);
	ms = (iv->time / 1000.0) + (double) iv->day * 86400000.0 +
		(double) iv->month * 30.0 * 86400000.0;
	if (ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be positive"),
				 errhint("Pass an interval such as '30 seconds', or NULL for mesh.exec_timeout.")));
	if (ms > MESH_MAX_TIMEOUT_MS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be at most 7 days"),
				 errhint("Pass an interval such as '30 seconds', or NULL for mesh.exec_timeout.")));
	return Max((long) ms, 1);
}

/* env: a JSON object of strings, names without '=' or NUL. */
static json_t *
env_to_json(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *jb;
	char	   *text;
	json_t	   *env;
	const char *key;
	json_t	   *value;

	if (PG_ARGISNULL(argno))
		return NULL;
	jb = PG_GETARG_JSONB_P(argno);
	text = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	env = json_loads(text, 0, NULL);
	if (env == NULL || !json_is_object(env))
	{
		json_decref(env);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("env must be a JSON object of strings"),
				 errhint("For example '{\"CI\": \"1\"}'.")));
	}
	json_object_foreach(env, key, value)
	{
		/* what the messages need, copied: the document is freed before raising */
		char	   *name = pstrdup(key);
		size_t		len = strlen(key) + 1 + (json_is_string(value) ? json_string_length(value) : 0);

		if (key[0] == '\0' || strchr(key, '=') != NULL)
		{
			json_decref(env);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("env name \"%s\" is not a valid variable name", name),
					 errhint("Variable names are non-empty and contain no \"=\".")));
		}
		if (!json_is_string(value))
		{
			json_decref(env);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("env value of \"%s\" must be a string", name),
					 errhint("Pass every value as a JSON string, e.g. '{\"N\": \"1\"}'.")));
		}
		if (len > MESH_MAX_ARG_BYTES)
		{
			json_decref(env);
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("env variable \"%.64s\" is %zu bytes long as NAME=value, the limit is %d",
							name, len, MESH_MAX_ARG_BYTES),
					 errhint("The kernel refuses a longer variable; pass large data as stdin or a file (mesh_write_file).")));
		}
	}
	return env;
}

/*
 * argv and env together, as execve counts them (each string with its NUL
 * and its pointer), must stay below the kernel's ARG_MAX.
 */
static void
check_exec_size(json_t *argv, json_t *env)
{
	size_t		total = 0;
	size_t		i;
	json_t	   *item;
	const char *key;

	json_array_foreach(argv, i, item)
		total += json_string_length(item) + 1 + sizeof(char *);
	if (env)
		json_object_foreach(env, key, item)
			total += strlen(key) + 1 + json_string_length(item) + 1 + sizeof(char *);
	if (total > MESH_MAX_ARGS_TOTAL_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argv and env take %zu bytes together, the limit is %d", total,
						MESH_MAX_ARGS_TOTAL_BYTES),
				 errhint("The kernel refuses larger argument lists; pass large data as stdin or a file (mesh_write_file).")));
}

/* mesh_exec: run a command in the run's workspace, materializing it first. */
Datum
mesh_exec(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *dir = optional_text(fcinfo, 2);
	bytea	   *stdin_data = PG_ARGISNULL(3) ? NULL :
		bounded_bytea_arg(fcinfo, 3, "stdin", "mesh.max_stdin_size", mesh_max_stdin_bytes);
	long		timeout_ms = timeout_ms_arg(fcinfo, 4);
	json_t	   *volatile argv = NULL;
	json_t	   *volatile env = NULL;
	json_t	   *req;
	MeshReply	reply;
	Datum		values[6];
	bool		nulls[6] = {false};

	/* jansson's memory is not freed with the query's: a refused input frees it here */
	PG_TRY();
	{
		argv = argv_to_json(fcinfo);
		env = env_to_json(fcinfo, 5);
		check_exec_size(argv, env);
		if (dir)
			check_path(dir, "dir");
	}
	PG_CATCH();
	{
		json_decref(argv);
		json_decref(env);
		PG_RE_THROW();
	}
	PG_END_TRY();
	req = json_pack("{s:s,s:o,s:s?,s:o?,s:b,s:I,s:i}",
					"run_id", run_id, "argv", argv, "dir", dir, "env", env,
					"has_stdin", stdin_data != NULL,
					"timeout_ms", (json_int_t) timeout_ms,
					"max_output", mesh_max_output_bytes);

	InitMaterializedSRF(fcinfo, 0);
	mesh_call(MESH_OP_EXEC, run_id, req,
			  stdin_data ? VARDATA_ANY(stdin_data) : NULL,
			  stdin_data ? VARSIZE_ANY_EXHDR(stdin_data) : 0, &reply);

	values[0] = Int32GetDatum((int32) json_integer_value(json_object_get(reply.doc, "exit_code")));
	values[1] = CStringGetTextDatum(json_string_value(json_object_get(reply.doc, "stdout")));
	values[2] = CStringGetTextDatum(json_string_value(json_object_get(reply.doc, "stderr")));
	values[3] = CStringGetTextDatum(json_string_value(json_object_get(reply.doc, "status")));
	values[4] = BoolGetDatum(json_is_true(json_object_get(reply.doc, "truncated")));
	values[5] = Int64GetDatum((int64) json_integer_value(json_object_get(reply.doc, "exec_id")));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	json_decref(reply.doc);
	return (Datum) 0;
}

/* mesh_read_file: a file's bytes from the run's workspace. */
Datum
mesh_read_file(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *path = required_text(fcinfo, 1, "path");
	json_t	   *req;
	MeshReply	reply;
	bytea	   *result;

	check_path(path, "path");
	req = json_pack("{s:s,s:s}", "run_id", run_id, "path", path);
	mesh_call(MESH_OP_READ_FILE, run_id, req, NULL, 0, &reply);
	json_decref(reply.doc);
	result = (bytea *) palloc(VARHDRSZ + reply.blob_len);
	SET_VARSIZE(result, VARHDRSZ + reply.blob_len);
	memcpy(VARDATA(result), reply.blob, reply.blob_len);
	PG_RETURN_BYTEA_P(result);
}

/* mesh_write_file: write bytes to a file in the run's workspace. */
Datum
mesh_write_file(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *path = required_text(fcinfo, 1, "path");
	bytea	   *content;
	int32		mode;
	json_t	   *req;
	MeshReply	reply;

	require_arg(fcinfo, 3, "mode", "Leave mode out for 420 (0644), or pass a mode in decimal, e.g. 493 for 0755.");
	mode = PG_GETARG_INT32(3);

	require_arg(fcinfo, 2, "content", "Write an empty file with ''::bytea.");
	content = bounded_bytea_arg(fcinfo, 2, "content", "mesh.max_file_size", mesh_max_file_bytes);
	check_path(path, "path");
	if (mode < 0 || mode > 07777)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode %d is not a file mode", mode),
				 errhint("Modes are given in decimal: 420 is 0644, 493 is 0755.")));
	if ((mode & 0400) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode %d (0%o) leaves the file unreadable to the workspace's own user", mode, mode),
				 errhint("Include owner read (0400): 420 is 0644, 256 is 0400.")));
	req = json_pack("{s:s,s:s,s:i}", "run_id", run_id, "path", path, "mode", mode);
	mesh_call(MESH_OP_WRITE_FILE, run_id, req, VARDATA_ANY(content),
			  VARSIZE_ANY_EXHDR(content), &reply);
	json_decref(reply.doc);
	PG_RETURN_VOID();
}

/* mesh_release: the run stops reaching its workspace; returns the outcome. */
Datum
mesh_release(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *reason = optional_text(fcinfo, 1);
	json_t	   *req = json_pack("{s:s,s:s?}", "run_id", run_id, "reason", reason);
	MeshReply	reply;
	text	   *outcome;

	mesh_call(MESH_OP_RELEASE, run_id, req, NULL, 0, &reply);
	outcome = cstring_to_text(json_string_value(json_object_get(reply.doc, "outcome")));
	json_decref(reply.doc);
	PG_RETURN_TEXT_P(outcome);
}

/*
 * mesh_snapshot: capture the run's /workspace as its project's new current
 * snapshot, while the run keeps working; returns the ready row.
 */
Datum
mesh_snapshot(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	json_t	   *req = json_pack("{s:s}", "run_id", run_id);
	MeshReply	reply;
	Datum		result;

	mesh_call(MESH_OP_SNAPSHOT, run_id, req, NULL, 0, &reply);
	result = row_from_json(json_string_value(json_object_get(reply.doc, "row")), "mesh.snapshots",
						   &snapshot_row_plan);
	json_decref(reply.doc);
	PG_RETURN_DATUM(result);
}
