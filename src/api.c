/*-------------------------------------------------------------------------
 *
 * api.c
 *	  The harness API: mesh_acquire, mesh_exec, mesh_read_file,
 *	  mesh_write_file, mesh_release, mesh_snapshot.
 *
 * These run in the caller's backend.  They validate input, build the typed
 * request (calls.h), hand it to the run's worker (handoff.c) and wait,
 * cancellably, for the reply.  All they allocate is palloc'd: an error at
 * any point frees it with the statement.
 * They never write a row themselves: a caller holding an uncommitted row the
 * worker needs would deadlock with it, and a caller's ROLLBACK must not
 * erase what the worker recorded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "storage/condition_variable.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "handoff.h"
#include "settings.h"


/*
 * Input limits, checked before anything is handed off.  Identifiers are
 * indexed (a btree entry must fit a third of a page); paths follow Linux's
 * PATH_MAX and NAME_MAX; one argv element or "NAME=value" must stay below
 * the kernel's MAX_ARG_STRLEN (32 pages, 128 KiB) and all of them together
 * well below ARG_MAX (a quarter of the 8 MiB stack), or execve fails with
 * E2BIG inside the sandbox.
 */
#define MESH_MAX_PATH_BYTES 4095
#define MESH_MAX_NAME_BYTES 255
#define MESH_MAX_ARG_BYTES (128 * 1024 - 1)
#define MESH_MAX_ARGS_TOTAL_BYTES (1024 * 1024)

PG_FUNCTION_INFO_V1(mesh_acquire);
PG_FUNCTION_INFO_V1(mesh_exec);
PG_FUNCTION_INFO_V1(mesh_read_file);
PG_FUNCTION_INFO_V1(mesh_write_file);
PG_FUNCTION_INFO_V1(mesh_release);
PG_FUNCTION_INFO_V1(mesh_snapshot);
PG_FUNCTION_INFO_V1(mesh_exec_start);
PG_FUNCTION_INFO_V1(mesh_exec_wait);
PG_FUNCTION_INFO_V1(mesh_exec_kill);
PG_FUNCTION_INFO_V1(mesh_exec_extend);
PG_FUNCTION_INFO_V1(mesh_eval_call);

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

static const char *utf8_arg(const char *value);

/* An identifier longer than the limit is refused naming the argument. */
static char *
check_id_length(char *value, const char *name)
{
	(void) utf8_arg(value);
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
 * Text for the worker.  In a UTF8 database text is valid UTF-8 by
 * construction; in any other, bytes that are not would reach a backend's
 * JSON, so they are refused here.
 */
static const char *
utf8_arg(const char *value)
{
	if (value && GetDatabaseEncoding() != PG_UTF8 &&
		!pg_verify_mbstr(PG_UTF8, value, strlen(value), true))
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("mesh_exec arguments must be valid UTF-8"),
				 errhint("Use a database with UTF8 encoding; pass binary data as bytea (stdin, file content).")));
	return value;
}

/* A text argument, added to the request. */
static MeshSpan
request_text(StringInfo req, const char *value)
{
	return mesh_msg_add_string(req, utf8_arg(value));
}

/* A request for OP, its fixed struct still to be set. */
static StringInfo
begin_request(MeshOp op, Size fixed_size)
{
	StringInfo	req = makeStringInfo();

	mesh_msg_begin(req, MESH_MSG_REQUEST, op, fixed_size);
	return req;
}

/*
 * The worker's reply to mesh_acquire and mesh_snapshot is the row its
 * statement returned (mesh.workspaces, mesh.snapshots), as that composite
 * datum: returned as it is, after checking it is a row of the type the
 * calling function returns.
 */
static Datum
row_reply(FunctionCallInfo fcinfo, const MeshMsg *reply)
{
	const MeshRowReply *r = mesh_msg_fixed(reply, sizeof(MeshRowReply));
	const char *data;
	Size		len = mesh_msg_bytes(reply, r->row, &data);
	TupleDesc	tupdesc;
	HeapTupleHeader row;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "mesh: the function must return a composite type");
	if (data == NULL || len < SizeofHeapTupleHeader)
		elog(ERROR, "mesh: the worker sent no row");
	row = (HeapTupleHeader) palloc(len);
	memcpy(row, data, len);
	if (VARSIZE(row) != len || HeapTupleHeaderGetTypeId(row) != tupdesc->tdtypeid)
		elog(ERROR, "mesh: the worker sent a row that is not a %s", format_type_be(tupdesc->tdtypeid));
	return HeapTupleHeaderGetDatum(row);
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
	StringInfo	req = begin_request(MESH_OP_ACQUIRE, sizeof(MeshAcquireRequest));
	MeshAcquireRequest r = {0};
	MeshMsg		reply;

	if (parent && strcmp(parent, run_id) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a run cannot be its own parent"),
				 errhint("Leave parent_run_id NULL for a top-level run.")));
	r.agent_id = request_text(req, agent_id);
	r.actor_id = request_text(req, actor_id);
	r.parent_run_id = request_text(req, parent);
	r.environment = request_text(req, environment);
	r.project = request_text(req, project);
	r.has_from_snapshot = !PG_ARGISNULL(6);
	r.from_snapshot = r.has_from_snapshot ? PG_GETARG_INT64(6) : 0;
	mesh_msg_set_fixed(req, &r, sizeof(r));

	mesh_call(run_id, req, NULL, 0, &reply);
	PG_RETURN_DATUM(row_reply(fcinfo, &reply));
}

/*
 * argv: a one-dimensional, non-empty text array without NULLs, added to the
 * request; returns the bytes execve will count for it.
 */
static size_t
add_argv(FunctionCallInfo fcinfo, StringInfo req, MeshExecRequest *r)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	size_t		total = 0;

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
	r->argc = n;
	r->argv = mesh_msg_add_list(req, n);
	for (int i = 0; i < n; i++)
	{
		char	   *arg;
		size_t		len;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argv[%d] is NULL", i + 1),
					 errhint("Every element of argv must be a string.")));
		arg = TextDatumGetCString(elems[i]);
		len = strlen(arg);
		if (len > MESH_MAX_ARG_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("argv[%d] is %zu bytes long, the limit is %d", i + 1, len, MESH_MAX_ARG_BYTES),
					 errhint("The kernel refuses a longer argument; pass large data as stdin or a file (mesh_write_file).")));
		if (i == 0 && arg[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argv[1], the program, must not be empty"),
					 errhint("argv[1] names the program to run, e.g. ARRAY['ls', '-l'].")));
		if (GetDatabaseEncoding() != PG_UTF8 && !pg_verify_mbstr(PG_UTF8, arg, len, true))
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("argv[%d] is not valid UTF-8", i + 1),
					 errhint("Use a database with UTF8 encoding.")));
		mesh_msg_set_list_item(req, r->argv, i, mesh_msg_add_bytes(req, arg, len));
		total += len + 1 + sizeof(char *);
	}
	return total;
}

/* An interval in milliseconds (a month counts 30 days). */
static double
interval_ms(const Interval *iv)
{
	return (iv->time / 1000.0) + (double) iv->day * 86400000.0 +
		(double) iv->month * 30.0 * 86400000.0;
}

/* The command's timeout in milliseconds: given, or mesh.exec_timeout. */
static long
timeout_ms_arg(FunctionCallInfo fcinfo, int argno)
{
	double		ms;

	if (PG_ARGISNULL(argno))
		return mesh_exec_timeout_ms;
	ms = interval_ms(PG_GETARG_INTERVAL_P(argno));
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

/*
 * env: a JSON object of strings, names without '=', added to the request;
 * returns the bytes execve will count for it.
 */
static size_t
add_env(FunctionCallInfo fcinfo, int argno, StringInfo req, MeshExecRequest *r)
{
	Jsonb	   *jb;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *name = NULL;
	int			i = 0;
	size_t		total = 0;

	r->env = mesh_msg_add_bytes(req, NULL, 0);
	if (PG_ARGISNULL(argno))
		return 0;
	jb = PG_GETARG_JSONB_P(argno);
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("env must be a JSON object of strings"),
				 errhint("For example '{\"CI\": \"1\"}'.")));
	r->nenv = (int32) JsonContainerSize(&jb->root);
	r->env = mesh_msg_add_list(req, 2 * r->nenv);
	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		size_t		len;

		if (tok == WJB_KEY)
		{
			name = pnstrdup(v.val.string.val, v.val.string.len);
			if (name[0] == '\0' || strchr(name, '=') != NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("env name \"%s\" is not a valid variable name", name),
						 errhint("Variable names are non-empty and contain no \"=\".")));
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("env value of \"%s\" must be a string", name),
					 errhint("Pass every value as a JSON string, e.g. '{\"N\": \"1\"}'.")));
		len = strlen(name) + 1 + v.val.string.len;
		if (len > MESH_MAX_ARG_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("env variable \"%.64s\" is %zu bytes long as NAME=value, the limit is %d",
							name, len, MESH_MAX_ARG_BYTES),
					 errhint("The kernel refuses a longer variable; pass large data as stdin or a file (mesh_write_file).")));
		mesh_msg_set_list_item(req, r->env, i++, request_text(req, name));
		mesh_msg_set_list_item(req, r->env, i++,
							   request_text(req, pnstrdup(v.val.string.val, v.val.string.len)));
		total += len + 1 + sizeof(char *);
	}
	return total;
}

/*
 * argv and env together, as execve counts them (each string with its NUL
 * and its pointer), must stay below the kernel's ARG_MAX.
 */
static void
check_exec_size(size_t total)
{
	if (total > MESH_MAX_ARGS_TOTAL_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argv and env take %zu bytes together, the limit is %d", total,
						MESH_MAX_ARGS_TOTAL_BYTES),
				 errhint("The kernel refuses larger argument lists; pass large data as stdin or a file (mesh_write_file).")));
}

/* A text result column from a reply string of known bounds. */
static Datum
reply_text(const MeshMsg *reply, MeshSpan span)
{
	const char *s = mesh_msg_string(reply, span);

	if (s == NULL)
		elog(ERROR, "mesh: the worker's reply lacks a text field");
	return PointerGetDatum(cstring_to_text_with_len(s, span.len));
}

/*
 * The request of mesh_exec and mesh_exec_start (OP), whose arguments are
 * the same: (run_id, argv, dir, stdin, timeout, env).  *stdin_data: the
 * blob to send with it, or NULL.
 */
static StringInfo
exec_request(FunctionCallInfo fcinfo, MeshOp op, bool eval, bytea **stdin_data)
{
	char	   *dir = optional_text(fcinfo, 2);
	long		timeout_ms;
	StringInfo	req = begin_request(op, sizeof(MeshExecRequest));
	MeshExecRequest r = {0};
	size_t		exec_size;

	*stdin_data = PG_ARGISNULL(3) ? NULL :
		bounded_bytea_arg(fcinfo, 3, "stdin", "mesh.max_stdin_size", mesh_max_stdin_bytes);
	timeout_ms = timeout_ms_arg(fcinfo, 4);
	exec_size = add_argv(fcinfo, req, &r);
	exec_size += add_env(fcinfo, 5, req, &r);
	check_exec_size(exec_size);
	if (dir)
		check_path(dir, "dir");
	r.dir = request_text(req, dir);
	r.has_stdin = *stdin_data != NULL;
	r.timeout_ms = timeout_ms;
	r.max_output = mesh_max_output_bytes;
	r.eval = eval;
	mesh_msg_set_fixed(req, &r, sizeof(r));
	return req;
}

/*
 * An exec, or an evaluation (EVAL: argv is [language, code], stdin the
 * input; mesh_eval), in the run's workspace, materializing it first.
 */
static Datum
exec_call(FunctionCallInfo fcinfo, bool eval)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	bytea	   *stdin_data;
	StringInfo	req = exec_request(fcinfo, MESH_OP_EXEC, eval, &stdin_data);
	MeshMsg		reply;
	const MeshExecReply *x;
	Datum		values[8];
	bool		nulls[8] = {false};

	InitMaterializedSRF(fcinfo, 0);
	mesh_call(run_id, req,
			  stdin_data ? VARDATA_ANY(stdin_data) : NULL,
			  stdin_data ? VARSIZE_ANY_EXHDR(stdin_data) : 0, &reply);

	x = mesh_msg_fixed(&reply, sizeof(MeshExecReply));
	values[0] = Int32GetDatum(x->exit_code);
	values[1] = reply_text(&reply, x->stdout_text);
	values[2] = reply_text(&reply, x->stderr_text);
	values[3] = reply_text(&reply, x->status);
	values[4] = BoolGetDatum(x->truncated);
	values[5] = Int64GetDatum(x->exec_id);
	values[6] = Int64GetDatum(x->stdout_bytes);
	values[7] = Int64GetDatum(x->stderr_bytes);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* mesh_exec: run a command in the run's workspace, materializing it first. */
Datum
mesh_exec(PG_FUNCTION_ARGS)
{
	return exec_call(fcinfo, false);
}

/* mesh.eval_call: mesh_eval's exec, with the same arguments as mesh_exec's. */
Datum
mesh_eval_call(PG_FUNCTION_ARGS)
{
	return exec_call(fcinfo, true);
}

/*
 * mesh_exec_start: start a command in the run's workspace (materializing it
 * first) and return its exec id as soon as it runs; a worker follows it.
 */
Datum
mesh_exec_start(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	bytea	   *stdin_data;
	StringInfo	req = exec_request(fcinfo, MESH_OP_EXEC_START, false, &stdin_data);
	MeshMsg		reply;

	mesh_call(run_id, req,
			  stdin_data ? VARDATA_ANY(stdin_data) : NULL,
			  stdin_data ? VARSIZE_ANY_EXHDR(stdin_data) : 0, &reply);
	PG_RETURN_INT64(((const MeshExecReply *) mesh_msg_fixed(&reply, sizeof(MeshExecReply)))->exec_id);
}

static const char exec_row_sql[] =
"SELECT e.exit_code, e.stdout, e.stderr, e.status::text, e.truncated, e.exec_id, "
"       e.stdout_bytes, e.stderr_bytes, e.run_id, e.output_stopped "
"  FROM mesh.readable_exec($1) e";

/* The exec's row as mesh_exec returns it (and its run), read now; a copy in the caller's context. */
static HeapTuple
exec_row(int64 exec_id, TupleDesc *desc)
{
	Oid			argtypes[1] = {INT8OID};
	Datum		args[1] = {Int64GetDatum(exec_id)};
	HeapTuple	row;

	SPI_connect();
	if (SPI_execute_with_args(exec_row_sql, 1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "mesh: the row of exec " INT64_FORMAT " could not be read", exec_id);
	row = SPI_copytuple(SPI_tuptable->vals[0]);
	*desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);
	SPI_finish();
	return row;
}

/* A column of exec_row's row, as text (NULL: NULL). */
static char *
exec_row_text(HeapTuple row, TupleDesc desc, int column)
{
	bool		isnull;
	Datum		d = heap_getattr(row, column, desc, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * mesh_exec_wait: the row mesh_exec returns, once the command has ended
 * (or, with a timeout, when it passes: the row as it is).  Sleeps on the
 * condition variable the workers broadcast when they record ends, and
 * looks again at least every second.
 */
Datum
mesh_exec_wait(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		exec_id;
	TimestampTz deadline = 0;
	HeapTuple	row;
	TupleDesc	desc;
	Datum		values[10];
	bool		nulls[10];

	require_arg(fcinfo, 0, "exec_id", "Pass the id mesh_exec_start returned.");
	exec_id = PG_GETARG_INT64(0);
	if (!PG_ARGISNULL(1))
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms_arg(fcinfo, 1));
	InitMaterializedSRF(fcinfo, 0);
	for (;;)
	{
		char	   *status;
		long		left = 1000;

		ConditionVariablePrepareToSleep(&mesh_shared->exec_ended);
		row = exec_row(exec_id, &desc);
		status = exec_row_text(row, desc, 4);
		if (strcmp(status, "running") != 0)
			break;
		if (deadline != 0)
		{
			left = Min(left, (long) ((deadline - GetCurrentTimestamp()) / 1000));
			if (left <= 0)
				break;
		}
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("mesh_exec_wait cannot see a command end in a %s transaction",
							XactIsoLevel == XACT_SERIALIZABLE ? "SERIALIZABLE" : "REPEATABLE READ"),
					 errhint("Call it in a READ COMMITTED transaction (the default), or poll mesh_exec_output.")));
		(void) ConditionVariableTimedSleep(&mesh_shared->exec_ended, left, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	heap_deform_tuple(row, desc, values, nulls);
	if (!nulls[9])
		ereport(NOTICE,
				(errmsg("mesh: not all output of exec " INT64_FORMAT " was stored: %s",
						exec_id, TextDatumGetCString(values[9])),
				 errdetail("The command ran on; its row says output_stopped and output_unstored."),
				 errhint("See mesh.exec_output_limit, mesh.output_run_quota, mesh.output_total_quota and mesh.output_disk_reserve.")));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* The signals mesh_exec_kill sends, by name without "SIG". */
static const char *const kill_signals[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"};

/* A signal's name as the backends take it: upper case, without "SIG"; unknown ones refused. */
static const char *
signal_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name = pstrdup(required_text(fcinfo, argno, "signal"));

	for (char *p = name; *p; p++)
		*p = pg_toupper((unsigned char) *p);
	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (int i = 0; i < lengthof(kill_signals); i++)
		if (strcmp(name, kill_signals[i]) == 0)
			return kill_signals[i];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("signal \"%s\" is not one mesh_exec_kill sends", required_text(fcinfo, argno, "signal")),
			 errhint("Use TERM (the default), KILL, INT, HUP, QUIT, USR1 or USR2.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * mesh_exec_kill: signal a running command's whole process tree; false,
 * with a notice, for one that already ended.
 */
Datum
mesh_exec_kill(PG_FUNCTION_ARGS)
{
	int64		exec_id;
	const char *signal;
	HeapTuple	row;
	TupleDesc	desc;
	char	   *status;
	char	   *run_id;
	StringInfo	req = begin_request(MESH_OP_EXEC_KILL, sizeof(MeshKillRequest));
	MeshKillRequest r = {0};
	MeshMsg		reply;

	require_arg(fcinfo, 0, "exec_id", "Pass the id mesh_exec_start returned.");
	exec_id = PG_GETARG_INT64(0);
	signal = signal_arg(fcinfo, 1);
	row = exec_row(exec_id, &desc);
	status = exec_row_text(row, desc, 4);
	run_id = exec_row_text(row, desc, 9);
	if (strcmp(status, "running") != 0)
	{
		ereport(NOTICE,
				(errmsg("exec " INT64_FORMAT " already ended (%s): nothing to signal", exec_id, status)));
		PG_RETURN_BOOL(false);
	}
	r.exec_id = exec_id;
	r.signal = mesh_msg_add_string(req, signal);
	mesh_msg_set_fixed(req, &r, sizeof(r));
	mesh_call(run_id, req, NULL, 0, &reply);
	PG_RETURN_BOOL(((const MeshKillReply *) mesh_msg_fixed(&reply, sizeof(MeshKillReply)))->signalled);
}

/*
 * mesh_exec_extend: move a running command's deadline BY later (a
 * foreground one running in another session, or a background one); the new
 * deadline.  The worker refuses what the backend cannot do, or what passes
 * the longest timeout or the run's budget, before any backend call.
 */
Datum
mesh_exec_extend(PG_FUNCTION_ARGS)
{
	int64		exec_id;
	double		ms;
	HeapTuple	row;
	TupleDesc	desc;
	char	   *status;
	char	   *run_id;
	StringInfo	req = begin_request(MESH_OP_EXEC_EXTEND, sizeof(MeshExtendRequest));
	MeshExtendRequest r = {0};
	MeshMsg		reply;

	require_arg(fcinfo, 0, "exec_id", "Pass the id mesh_exec or mesh_exec_start returned.");
	require_arg(fcinfo, 1, "by", "Pass an interval such as '5 minutes'.");
	exec_id = PG_GETARG_INT64(0);
	ms = interval_ms(PG_GETARG_INTERVAL_P(1));
	if (ms < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("by must be positive (at least 1 millisecond)"),
				 errhint("Pass an interval such as '5 minutes'.")));
	if (ms > MESH_MAX_TIMEOUT_MS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("by must be at most 7 days"),
				 errhint("A command's timeout, extensions included, is at most 7 days.")));
	row = exec_row(exec_id, &desc);
	status = exec_row_text(row, desc, 4);
	run_id = exec_row_text(row, desc, 9);
	if (strcmp(status, "running") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("exec " INT64_FORMAT " is not running (%s): there is no deadline to extend",
						exec_id, status),
				 errhint("Only a running command's timeout can be extended.")));
	r.exec_id = exec_id;
	r.by_ms = (int64) ms;
	mesh_msg_set_fixed(req, &r, sizeof(r));
	mesh_call(run_id, req, NULL, 0, &reply);
	PG_RETURN_TIMESTAMPTZ(((const MeshExtendReply *) mesh_msg_fixed(&reply, sizeof(MeshExtendReply)))->deadline);
}

/* A file call's request: the path, and the mode of a write. */
static StringInfo
file_request(MeshOp op, const char *run_id, const char *path, int32 mode)
{
	StringInfo	req = begin_request(op, sizeof(MeshFileRequest));
	MeshFileRequest r;

	r.path = request_text(req, path);
	r.mode = mode;
	mesh_msg_set_fixed(req, &r, sizeof(r));
	return req;
}

/* mesh_read_file: a file's bytes from the run's workspace. */
Datum
mesh_read_file(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *path = required_text(fcinfo, 1, "path");
	MeshMsg		reply;
	const char *data;
	Size		len;
	bytea	   *result;

	check_path(path, "path");
	mesh_call(run_id, file_request(MESH_OP_READ_FILE, run_id, path, 0), NULL, 0, &reply);
	len = mesh_msg_bytes(&reply, ((const MeshReadReply *) mesh_msg_fixed(&reply, sizeof(MeshReadReply)))->content,
						 &data);
	result = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), data, len);
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
	MeshMsg		reply;

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
	mesh_call(run_id, file_request(MESH_OP_WRITE_FILE, run_id, path, mode), VARDATA_ANY(content),
			  VARSIZE_ANY_EXHDR(content), &reply);
	PG_RETURN_VOID();
}

/* mesh_release: the run stops reaching its workspace; returns the outcome. */
Datum
mesh_release(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	char	   *reason = optional_text(fcinfo, 1);
	StringInfo	req = begin_request(MESH_OP_RELEASE, sizeof(MeshReleaseRequest));
	MeshReleaseRequest r = {0};
	MeshMsg		reply;

	r.reason = request_text(req, reason);
	mesh_msg_set_fixed(req, &r, sizeof(r));
	mesh_call(run_id, req, NULL, 0, &reply);
	PG_RETURN_DATUM(reply_text(&reply, ((const MeshReleaseReply *)
										mesh_msg_fixed(&reply, sizeof(MeshReleaseReply)))->outcome));
}

/*
 * mesh_snapshot: capture the run's /workspace as its project's new current
 * snapshot, while the run keeps working; returns the ready row.
 */
Datum
mesh_snapshot(PG_FUNCTION_ARGS)
{
	char	   *run_id = required_id(fcinfo, 0, "run_id");
	MeshMsg		reply;

	mesh_call(run_id, begin_request(MESH_OP_SNAPSHOT, 0), NULL, 0, &reply);
	PG_RETURN_DATUM(row_reply(fcinfo, &reply));
}

/*
 * mesh.project_name_valid: a project is a key the harness chooses (a
 * repository name, say), never a path: letters, digits and . _ / @ : + -,
 * not starting with a punctuation mark other than @, no ".." or "//", at
 * most 200 bytes.  In C because the CHECKs of mesh.workspaces and
 * mesh.snapshots run it on every update of a row with a project: a SQL or
 * PL/pgSQL function there costs a search_path switch (or a plan) per row.
 */
PG_FUNCTION_INFO_V1(mesh_project_name_valid);

Datum
mesh_project_name_valid(PG_FUNCTION_ARGS)
{
	text	   *arg = PG_GETARG_TEXT_PP(0);
	const char *p = VARDATA_ANY(arg);
	int			len = VARSIZE_ANY_EXHDR(arg);

	if (len < 1 || len > 200 || !(isascii((unsigned char) p[0]) &&
								   (isalnum((unsigned char) p[0]) || p[0] == '@')))
		PG_RETURN_BOOL(false);
	for (int i = 1; i < len; i++)
	{
		unsigned char c = (unsigned char) p[i];

		if (!isascii(c) || !(isalnum(c) || strchr("._/@:+-", c) != NULL) ||
			((c == '.' || c == '/') && p[i - 1] == (char) c))
			PG_RETURN_BOOL(false);
	}
	PG_RETURN_BOOL(true);
}
