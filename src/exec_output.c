/*-------------------------------------------------------------------------
 *
 * exec_output.c
 *	  An exec's output: stored whole, clamped for people.
 *
 * Backends hand back the last mesh.exec_output_limit bytes of each stream
 * as the command wrote them.  Those bytes (redacted) are stored in
 * mesh.exec_output, in chunks keyed by byte offset, one chunk at a time
 * (never a second copy of a whole stream), in the transaction that records
 * the exec's end, for mesh_exec_output to read back; mesh_exec's return and
 * mesh.execs keep mesh.max_output bytes of each, head and tail around a
 * marker, as text.
 *
 * What all stored output takes is bounded too, so that no command can fill
 * the disk PostgreSQL writes to (PostgreSQL stops on a full pg_wal): before
 * storing, the allowance is what is left of the run's quota
 * (mesh.output_run_quota), of the install's (mesh.output_total_quota,
 * against mesh.exec_output's size on disk) and of the free space above a
 * reserve on the data directory's and pg_wal's filesystems
 * (mesh.output_disk_reserve).  Past it storing stops: the exec row says why
 * (output_stopped), an event and a NOTICE tell, and the command runs on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/statvfs.h>

#include "mesh_json.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "exec_output.h"
#include "settings.h"
#include "txn.h"

PG_FUNCTION_INFO_V1(mesh_output_text);

/* Stored rows hold at most this many bytes of a stream each. */
#define OUTPUT_CHUNK_BYTES (1024 * 1024)

static const char *const stream_names[2] = {"stdout", "stderr"};

static const char store_chunk_sql[] =
"SELECT mesh.exec_output_chunk($1, $2, $3, $4)";
static const char store_counts_sql[] =
"SELECT mesh.exec_output_counts($1, $2, $3, $4, $5, $6, $7, $8) AS new_stop";
static const char allowance_sql[] =
"SELECT allowed, reason FROM mesh.exec_output_allowance($1, $2, $3)";

#define MB ((int64) 1024 * 1024)

/*
 * Free bytes above the reserve on the filesystem of PATH (relative to the
 * data directory, a worker's working directory), and that filesystem's size.
 */
static int64
free_above_reserve(const char *path, int64 *fs_size)
{
	struct statvfs st;
	int64		reserve;

	if (statvfs(path, &st) != 0)
	{
		*fs_size = 0;
		return 0;				/* cannot tell: store nothing rather than risk the disk */
	}
	*fs_size = (int64) st.f_blocks * (int64) st.f_frsize;
	reserve = mesh_output_disk_reserve_mb >= 0
		? (int64) mesh_output_disk_reserve_mb * MB
		: Max(*fs_size / 10, 2 * (int64) max_wal_size_mb * MB);
	return (int64) st.f_bavail * (int64) st.f_frsize - reserve;
}

/*
 * How many more bytes exec EXEC_ID may store now, and the bound that leaves
 * the least (*reason): the run's and the install's quotas (in SQL, from the
 * rows and mesh.exec_output's size) and the data directory's and pg_wal's
 * free space above the reserve.  In the caller's transaction.
 */
int64
exec_output_allowance(int64 exec_id, const char **reason)
{
	int64		data_fs;
	int64		wal_fs;
	int64		disk_left = Min(free_above_reserve(".", &data_fs), free_above_reserve("pg_wal", &wal_fs));
	int64		total_quota = mesh_output_total_quota_mb >= 0 ? (int64) mesh_output_total_quota_mb * MB : data_fs / 10;
	MeshParam	p[3] = {mesh_int8_param(exec_id), mesh_int8_param((int64) mesh_output_run_quota_mb * MB),
	mesh_int8_param(total_quota)};
	MeshRows   *rows = mesh_sql(allowance_sql, 3, p);
	int64		allowed;

	if (rows->n != 1 || mesh_col_isnull(rows, 0, "allowed"))
	{
		*reason = "run quota";	/* no such exec: nothing to store it under */
		return 0;
	}
	allowed = mesh_col_int64(rows, 0, "allowed");
	*reason = mesh_col_text(rows, 0, "reason");
	if (disk_left < allowed)
	{
		allowed = Max(disk_left, 0);
		*reason = "disk reserve";
	}
	return allowed;
}

/* The setting behind a reason storing stopped, for the people who read it. */
const char *
exec_output_stop_setting(const char *reason)
{
	if (strcmp(reason, "command limit") == 0)
		return "mesh.exec_output_limit";
	if (strcmp(reason, "run quota") == 0)
		return "mesh.output_run_quota";
	if (strcmp(reason, "install quota") == 0)
		return "mesh.output_total_quota";
	return "mesh.output_disk_reserve";
}

/*
 * Split ALLOWED bytes between the two streams' LEN: each gets up to half,
 * and what one does not use the other may.
 */
void
exec_output_share(int64 allowed, const size_t len[2], size_t share[2])
{
	int64		half = allowed / 2;

	share[0] = (size_t) Min((int64) len[0], half);
	share[1] = (size_t) Min((int64) len[1], allowed - (int64) share[0]);
	share[0] = (size_t) Min((int64) len[0], allowed - (int64) share[1]);
}

/*
 * One stream's bytes (which: 0 stdout, 1 stderr) from offset s->dropped on,
 * a chunk at a time: only one chunk's copy (and what storing it allocates)
 * exists at once, whatever the stream's size.  In the caller's transaction.
 */
void
exec_output_store_stream(int64 exec_id, int which, const MeshOutputStream *s)
{
	MeshParam	p[4] = {mesh_int8_param(exec_id), mesh_text_param(stream_names[which])};
	MemoryContext chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "mesh output chunk",
													ALLOCSET_DEFAULT_SIZES);

	for (size_t done = 0; done < s->len; done += OUTPUT_CHUNK_BYTES)
	{
		size_t		n = Min((size_t) OUTPUT_CHUNK_BYTES, s->len - done);
		MemoryContext old = MemoryContextSwitchTo(chunk_cxt);
		bytea	   *chunk = palloc(VARHDRSZ + n);

		SET_VARSIZE(chunk, VARHDRSZ + n);
		memcpy(VARDATA(chunk), s->data + done, n);
		p[2] = mesh_int8_param(s->dropped + (int64) done);
		p[3] = mesh_param(BYTEAOID, PointerGetDatum(chunk));
		(void) mesh_sql(store_chunk_sql, 4, p);
		MemoryContextSwitchTo(old);
		MemoryContextReset(chunk_cxt);
		CHECK_FOR_INTERRUPTS();
	}
	MemoryContextDelete(chunk_cxt);
}

/* Past the ceiling only the tail is stored: what went before counts as dropped. */
static MeshOutputStream
within_limit(const MeshOutputStream *s)
{
	MeshOutputStream kept = *s;
	size_t		limit = (size_t) mesh_exec_output_limit_bytes;

	if (kept.len > limit)
	{
		kept.dropped += kept.len - limit;
		kept.data += kept.len - limit;
		kept.len = limit;
	}
	return kept;
}

/*
 * Store both streams of an exec (stdout, stderr), with the exec row's byte
 * counts, in the caller's transaction (store_exec_finished's, so the output
 * is durable with the exec's end).  Each stream keeps its last bytes within
 * mesh.exec_output_limit, and both together within the allowance: what goes
 * counts as dropped from the head, as past the limit.  Returns why storing
 * stopped short (for the caller's NOTICE), or NULL; *stored is the bytes
 * stored, which the caller charges to the run's quota with the exec's end
 * (mesh.exec_finish), so that the workspace row is updated once per exec.
 * Nothing is written for an exec that printed nothing.
 */
const char *
exec_output_store(int64 exec_id, const MeshOutputStream streams[2], int64 *stored)
{
	MeshParam	counts[8] = {mesh_int8_param(exec_id)};
	MeshOutputStream kept[2];
	size_t		len[2];
	size_t		share[2];
	const char *reason = NULL;
	int64		allowed;

	*stored = 0;
	if (streams[0].len == 0 && streams[0].dropped == 0 &&
		streams[1].len == 0 && streams[1].dropped == 0)
		return NULL;
	for (int i = 0; i < 2; i++)
	{
		kept[i] = within_limit(&streams[i]);
		len[i] = kept[i].len;
	}
	allowed = exec_output_allowance(exec_id, &reason);
	if ((int64) (len[0] + len[1]) <= allowed)
		reason = NULL;
	exec_output_share(allowed, len, share);
	for (int i = 0; i < 2; i++)
	{
		size_t		cut = kept[i].len - share[i];

		kept[i].data += cut;
		kept[i].dropped += (int64) cut;
		kept[i].len = share[i];
		exec_output_store_stream(exec_id, i, &kept[i]);
		counts[1 + 2 * i] = mesh_int8_param(kept[i].dropped + (int64) kept[i].len);
		counts[2 + 2 * i] = mesh_int8_param(kept[i].dropped);
	}
	*stored = (int64) (share[0] + share[1]);
	counts[5] = mesh_int8_param(0);	/* charged by mesh.exec_finish: see above */
	counts[6] = mesh_text_param(reason);
	counts[7] = mesh_int8_param((int64) (len[0] + len[1] - share[0] - share[1]));
	(void) mesh_sql(store_counts_sql, 8, counts);
	return reason;
}

/*
 * What people see of a stream of TOTAL bytes whose last LEN are in *data:
 * all of it when it fits MAX_BYTES, else its first and last bytes around the
 * marker "…[mesh: N bytes omitted]…" (N counting every byte not shown).
 */
void
exec_output_clamp(char **data, size_t *len, int64 total, long max_bytes, bool *truncated)
{
	StringInfoData buf;
	size_t		head;
	size_t		tail;

	if (total <= max_bytes && (int64) *len == total)
		return;
	head = Min((size_t) max_bytes / 2, *len);
	tail = Min((size_t) max_bytes - head, *len - head);
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, *data, (int) head);
	appendStringInfo(&buf, "\n\xe2\x80\xa6[mesh: " INT64_FORMAT " bytes omitted]\xe2\x80\xa6\n",
					 total - (int64) head - (int64) tail);
	appendBinaryStringInfo(&buf, *data + *len - tail, (int) tail);
	*data = buf.data;
	*len = buf.len;
	*truncated = true;
}

/* mesh.output_text(bytea): stored bytes as text, NUL and invalid UTF-8 as U+FFFD. */
Datum
mesh_output_text(PG_FUNCTION_ARGS)
{
	bytea	   *data = PG_GETARG_BYTEA_PP(0);

	PG_RETURN_TEXT_P(cstring_to_text(mesh_sanitize_text(VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data))));
}

/* Text a PostgreSQL text column can hold: invalid UTF-8 and NUL become U+FFFD. */
char *
mesh_sanitize_text(const char *data, size_t len)
{
	StringInfoData out;
	size_t		i = 0;

	initStringInfo(&out);
	while (i < len)
	{
		const unsigned char *p = (const unsigned char *) data + i;
		int			n = pg_utf_mblen(p);

		if (*p != 0 && i + n <= len && pg_utf8_islegal(p, n))
		{
			appendBinaryStringInfo(&out, (const char *) p, n);
			i += n;
		}
		else
		{
			appendStringInfoString(&out, "\xEF\xBF\xBD");
			i += 1;
		}
	}
	return out.data;
}
