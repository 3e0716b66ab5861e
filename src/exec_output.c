/*-------------------------------------------------------------------------
 *
 * exec_output.c
 *	  An exec's output: stored whole, clamped for people.
 *
 * Backends hand back the last mesh.exec_output_limit bytes of each stream
 * as the command wrote them.  Those bytes (redacted) are stored in
 * mesh.exec_output, in chunks keyed by byte offset, one chunk at a time
 * (never a second copy of a whole stream), in the transaction that records
 * the exec's end, for mesh_exec_output to read back; mesh_exec's return and mesh.execs keep mesh.max_output bytes of
 * each, head and tail around a marker, as text.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "exec_output.h"
#include "mesh_exec.h"
#include "store.h"
#include "txn.h"

PG_FUNCTION_INFO_V1(mesh_output_text);

/* Stored rows hold at most this many bytes of a stream each. */
#define OUTPUT_CHUNK_BYTES (1024 * 1024)

static const char *const stream_names[2] = {"stdout", "stderr"};

static const char store_chunk_sql[] =
"SELECT mesh.exec_output_chunk($1, $2, $3, $4)";
static const char store_counts_sql[] =
"SELECT mesh.exec_output_counts($1, $2, $3, $4, $5)";

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
 * is durable with the exec's end).  Nothing is written for an exec that
 * printed nothing.
 */
void
exec_output_store(int64 exec_id, const MeshOutputStream streams[2])
{
	MeshParam	counts[5] = {mesh_int8_param(exec_id)};

	if (streams[0].len == 0 && streams[0].dropped == 0 &&
		streams[1].len == 0 && streams[1].dropped == 0)
		return;
	for (int i = 0; i < 2; i++)
	{
		MeshOutputStream kept = within_limit(&streams[i]);

		exec_output_store_stream(exec_id, i, &kept);
		counts[1 + 2 * i] = mesh_int8_param(kept.dropped + (int64) kept.len);
		counts[2 + 2 * i] = mesh_int8_param(kept.dropped);
	}
	(void) mesh_sql(store_counts_sql, 5, counts);
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
