/*-------------------------------------------------------------------------
 *
 * store_background.c
 *	  The rows of background commands (mesh_exec_start): their output
 *	  stored as it comes, with a NOTIFY per step; where a restarted
 *	  worker takes them up again; their clamp for people at the end.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "utils/memutils.h"

#include "calls.h"
#include "credentials.h"
#include "exec_output.h"
#include "settings.h"
#include "store.h"
#include "txn.h"

static const char *const stream_names[2] = {"stdout", "stderr"};

typedef struct ProgressArgs
{
	int64		exec_id;
	const MeshOutputStream *fresh;	/* the new bytes of each stream, at their stored offsets */
	const int64 *read;				/* backend offsets read and stored, after them */
} ProgressArgs;

static const char progress_sql[] =
"SELECT mesh.exec_output_progress($1, $2, $3, $4, $5, $6, $7, $8) AS new_stop";

/*
 * How much of each stream's new bytes FRESH may be stored (SHARE), and why
 * not all (the return, or NULL): a stream stops at mesh.exec_output_limit,
 * both at the allowance.  Only ever the head: stored chunks are appended,
 * never rewritten, so a flood writes no more than what is kept.
 */
static const char *
progress_share(int64 exec_id, const MeshOutputStream *fresh, size_t share[2])
{
	const char *reason = NULL;
	const char *quota_reason;
	size_t		len[2];
	int64		allowed;

	for (int i = 0; i < 2; i++)
	{
		int64		room = Max((int64) mesh_exec_output_limit_bytes - fresh[i].dropped, 0);

		len[i] = (size_t) Min((int64) fresh[i].len, room);
		if (len[i] < fresh[i].len)
			reason = "command limit";
	}
	allowed = exec_output_allowance(exec_id, &quota_reason);
	if ((int64) (len[0] + len[1]) > allowed)
		reason = quota_reason;
	exec_output_share(allowed, len, share);
	return reason;
}

static const char channel_sql[] =
"SELECT mesh.exec_channel_name(e.id, e.notify_key) AS channel FROM mesh.execs e WHERE e.id = $1";

/*
 * The exec's NOTIFY channel, read in the current transaction:
 * mesh_exec_<id>_<its row's random key>, a name only the roles that may read
 * the exec learn (mesh_exec_channel), so no other role can LISTEN to its
 * progress.
 */
char *
store_exec_channel(int64 exec_id)
{
	MeshParam	p = mesh_int8_param(exec_id);
	MeshRows   *rows = mesh_sql(channel_sql, 1, &p);

	if (rows->n == 0)
		elog(ERROR, "mesh: exec " INT64_FORMAT " has no row to notify for", exec_id);
	return mesh_col_text(rows, 0, "channel");
}

static void
progress_body(void *arg)
{
	ProgressArgs *a = (ProgressArgs *) arg;
	size_t		share[2];
	const char *stopped = progress_share(a->exec_id, a->fresh, share);
	MeshParam	p[8];
	char	   *channel = NULL;

	p[0] = mesh_int8_param(a->exec_id);
	for (int i = 0; i < 2; i++)
	{
		MeshOutputStream s = a->fresh[i];

		s.len = share[i];
		/* a stream that stored nothing keeps its length (it may have stopped before) */
		p[1 + i] = s.len > 0 ? mesh_int8_param(s.dropped + (int64) s.len) : mesh_null_param(INT8OID);
		if (s.len == 0)
			continue;
		exec_output_store_stream(a->exec_id, i, &s);
		/* a listener reads from offset on with mesh_exec_output */
		if (channel == NULL)
			channel = store_exec_channel(a->exec_id);
		Async_Notify(channel,
					 psprintf("{\"stream\": \"%s\", \"offset\": " INT64_FORMAT
							  ", \"bytes\": %zu, \"next\": " INT64_FORMAT "}",
							  stream_names[i], s.dropped, s.len, s.dropped + (int64) s.len));
	}
	p[3] = mesh_int8_param(a->read[0]);
	p[4] = mesh_int8_param(a->read[1]);
	p[5] = mesh_int8_param((int64) (share[0] + share[1]));
	p[6] = mesh_text_param(stopped);
	p[7] = mesh_int8_param((int64) (a->fresh[0].len + a->fresh[1].len - share[0] - share[1]));
	if (mesh_col_bool(mesh_sql(progress_sql, 8, p), 0, "new_stop"))
		Async_Notify(channel ? channel : store_exec_channel(a->exec_id),
					 psprintf("{\"stopped\": \"%s\", \"setting\": \"%s\"}",
							  stopped, exec_output_stop_setting(stopped)));
}

/*
 * A background command's new output (FRESH: each stream's new bytes, with
 * the offset they start at as stored) and how far the backend's streams
 * have been read (READ), in one transaction that also tells listeners.
 * Past a stream's limit or the allowance the bytes are read and not stored
 * (the row says why, once).  Committed without waiting for its flush: the
 * worker flushes to *commit_lsn before it tells the backend these bytes
 * are kept.
 */
bool
store_exec_progress(int64 exec_id, const MeshOutputStream *fresh, const int64 read[2],
					XLogRecPtr *commit_lsn, ErrorData **err)
{
	ProgressArgs a = {exec_id, fresh, read};

	if (!mesh_txn("mesh worker: exec output", MESH_COMMIT_DEFERRED, progress_body, &a, err))
		return false;
	*commit_lsn = mesh_txn_commit_lsn();
	return true;
}

static const char clamped_sql[] =
"SELECT o.clamped AS stdout, o.truncated AS stdout_truncated, "
"       e.clamped AS stderr, e.truncated AS stderr_truncated "
"  FROM mesh.exec_output_clamped($1, 'stdout', $2) o, mesh.exec_output_clamped($1, 'stderr', $2) e";

/*
 * What mesh_exec would have returned of each stream of a background
 * command, from its stored output (mesh.max_output bytes each, head and
 * tail around a marker), for its row at the end.
 */
bool
store_exec_clamped(int64 exec_id, int max_bytes, MeshExecResult *result, ErrorData **err)
{
	MeshParam	p[2] = {mesh_int8_param(exec_id), mesh_int4_param(max_bytes)};
	MeshRows   *rows;

	if (!mesh_txn_sql("mesh worker: exec clamp", MESH_COMMIT_DEFERRED, clamped_sql, 2, p, &rows, err))
		return false;
	result->stdout_data = mesh_col_text(rows, 0, "stdout");
	result->stderr_data = mesh_col_text(rows, 0, "stderr");
	result->stdout_len = strlen(result->stdout_data);
	result->stderr_len = strlen(result->stderr_data);
	result->truncated = mesh_col_bool(rows, 0, "stdout_truncated") ||
		mesh_col_bool(rows, 0, "stderr_truncated");
	return true;
}

static const char background_execs_sql[] =
"SELECT b.exec_id, b.run_id, b.timeout_ms, b.started_at, b.stdout_bytes, b.stderr_bytes, "
"       b.stdout_read, b.stderr_read "
"  FROM mesh.background_execs($1, $2) b";

/*
 * The background commands a worker starting as worker_index of nworkers
 * follows: its predecessor's, with where it had got to (a list of
 * MeshFollowRequest; *run_ids, their runs).
 */
bool
store_background_execs(int worker_index, int nworkers, List **follows, List **run_ids,
					   ErrorData **err)
{
	MeshParam	p[2] = {mesh_int4_param(worker_index), mesh_int4_param(nworkers)};
	MeshRows   *rows;

	*follows = *run_ids = NIL;
	if (!mesh_txn_sql("mesh worker: background execs", MESH_COMMIT_DEFERRED, background_execs_sql,
					  2, p, &rows, err))
		return false;
	for (uint64 r = 0; r < rows->n; r++)
	{
		MeshFollowRequest *f = palloc0(sizeof(MeshFollowRequest));
		bool		isnull;

		f->exec_id = mesh_col_int64(rows, r, "exec_id");
		f->timeout_ms = mesh_col_int64(rows, r, "timeout_ms");
		f->started_at = DatumGetTimestampTz(mesh_col_datum(rows, r, "started_at", TIMESTAMPTZOID,
														   &isnull));
		f->stored[0] = mesh_col_int64(rows, r, "stdout_bytes");
		f->stored[1] = mesh_col_int64(rows, r, "stderr_bytes");
		f->read[0] = mesh_col_int64(rows, r, "stdout_read");
		f->read[1] = mesh_col_int64(rows, r, "stderr_read");
		*follows = lappend(*follows, f);
		*run_ids = lappend(*run_ids, mesh_col_text(rows, r, "run_id"));
	}
	return true;
}

static const char run_secrets_sql[] =
"SELECT g.deliver_as AS variable, g.name, s.value FROM mesh.grants g "
"  JOIN mesh.workspaces w ON w.run_id = g.run_id "
"  JOIN mesh.secrets s ON s.agent_id = w.agent_id AND s.name = g.name "
" WHERE g.run_id = $1 AND g.kind = 'secret'";

/*
 * Every secret value a run's grants name, to redact from the output of a
 * background command a restarted worker follows again (MeshDelivered,
 * palloc'd in the caller's context).
 */
bool
store_run_secrets(const char *run_id, List **secrets, ErrorData **err)
{
	MeshParam	p = mesh_text_param(run_id);
	MeshRows   *rows;

	*secrets = NIL;
	if (!mesh_txn_sql("mesh worker: run secrets", MESH_COMMIT_DEFERRED, run_secrets_sql, 1, &p, &rows, err))
		return false;
	for (uint64 r = 0; r < rows->n; r++)
	{
		MeshDelivered *d = palloc0(sizeof(MeshDelivered));

		d->variable = mesh_col_text(rows, r, "variable");
		d->name = mesh_col_text(rows, r, "name");
		d->value = mesh_col_text(rows, r, "value");
		*secrets = lappend(*secrets, d);
	}
	return true;
}

static const char kill_event_sql[] =
"INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"VALUES ('exec_signalled', $1, $2, $3, pg_catalog.jsonb_build_object('exec_id', $4, 'signal', $5))";

/* mesh_exec_kill signalled a command: an event. */
bool
store_exec_signalled(const MeshWorkspace *ws, int64 exec_id, const char *signal, ErrorData **err)
{
	MeshParam	p[5] = {mesh_text_param(ws->run_id), mesh_int8_param(ws->id),
		mesh_text_param(ws->backend_kind), mesh_int8_param(exec_id), mesh_text_param(signal)};

	return mesh_txn_sql("mesh worker: exec signalled", MESH_COMMIT_DEFERRED, kill_event_sql, 5, p,
						NULL, err);
}

static const char extend_exec_sql[] =
"SELECT e.status::text AS status, e.timeout_ms, "
"       e.started_at + (e.timeout_ms + $3) * interval '1 millisecond' > w.created_at + l.max_run_lifetime AS past_lifetime, "
"       (w.created_at + l.max_run_lifetime)::text AS lifetime_until "
"  FROM mesh.execs e JOIN mesh.workspaces w ON w.id = e.workspace_id "
"  JOIN mesh.run_limits l ON l.workspace_id = w.id "
" WHERE e.id = $1 AND e.run_id = $2";

/*
 * mesh_exec_extend, before the backend is asked: the exec's status and
 * timeout as its row has them, and whether BY_MS more would take it past
 * its run's lifetime bound (*LIFETIME_UNTIL); false (err) if it could not
 * be read.  A row that is not the run's reads as status NULL.
 */
bool
store_exec_for_extend(const char *run_id, int64 exec_id, int64 by_ms, MeshExtendCheck *check,
					  ErrorData **err)
{
	MeshParam	p[3] = {mesh_int8_param(exec_id), mesh_text_param(run_id), mesh_int8_param(by_ms)};
	MeshRows   *rows;

	memset(check, 0, sizeof(*check));
	if (!mesh_txn_sql("mesh worker: exec to extend", MESH_COMMIT_DEFERRED, extend_exec_sql, 3, p,
					  &rows, err))
		return false;
	if (rows->n == 1)
	{
		check->status = mesh_col_text(rows, 0, "status");
		check->timeout_ms = mesh_col_int64(rows, 0, "timeout_ms");
		check->past_lifetime = mesh_col_bool(rows, 0, "past_lifetime");
		check->lifetime_until = mesh_col_text(rows, 0, "lifetime_until");
	}
	return true;
}

static const char extended_sql[] =
"WITH e AS (UPDATE mesh.execs e SET timeout_ms = e.timeout_ms + $5 "
"            WHERE e.id = $4 AND e.run_id = $1 AND e.status = 'running' "
"           RETURNING e.timeout_ms, e.started_at), "
"     ev AS (INSERT INTO mesh.events (kind, run_id, workspace_id, backend, detail) "
"            SELECT 'exec_extended', $1, $2, $3, "
"                   pg_catalog.jsonb_build_object('exec_id', $4, 'by_ms', $5, 'timeout_ms', e.timeout_ms, "
"                                                 'by_role', $6::pg_catalog.oid::pg_catalog.regrole::text) "
"              FROM e) "
"SELECT e.timeout_ms, e.started_at + e.timeout_ms * interval '1 millisecond' AS deadline FROM e";

/*
 * mesh_exec_extend moved a command's deadline: its row's timeout and an
 * event (who, by how much), one transaction.  *FOUND false: the command's
 * end was recorded in between (nothing written).
 */
bool
store_exec_extended(const MeshWorkspace *ws, int64 exec_id, int64 by_ms, const char *role,
					bool *found, int64 *timeout_ms, TimestampTz *deadline, ErrorData **err)
{
	MeshParam	p[6] = {mesh_text_param(ws->run_id), mesh_int8_param(ws->id),
		mesh_text_param(ws->backend_kind), mesh_int8_param(exec_id), mesh_int8_param(by_ms),
	role ? mesh_text_param(role) : mesh_null_param(TEXTOID)};
	MeshRows   *rows;
	bool		isnull;

	*found = false;
	if (!mesh_txn_sql("mesh worker: exec extended", MESH_COMMIT_DURABLE, extended_sql, 6, p,
					  &rows, err))
		return false;
	if (rows->n != 1)
		return true;
	*found = true;
	*timeout_ms = mesh_col_int64(rows, 0, "timeout_ms");
	*deadline = DatumGetTimestampTz(mesh_col_datum(rows, 0, "deadline", TIMESTAMPTZOID, &isnull));
	return true;
}
