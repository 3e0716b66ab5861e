/*-------------------------------------------------------------------------
 *
 * worker_durable.c
 *	  When a worker's commits reach the disk: what each turn of the loop must
 *	  flush (or only write) before its requests and replies leave, and the
 *	  group commit that lets several calls' results share one flush
 *	  (mesh.worker_group_commit_delay; docs/design.md, invariant 4).
 *
 * The operations say what they committed (worker_want_*); the loop
 * (worker.c) makes the turn durable once, whatever the number of calls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "settings.h"
#include "txn.h"
#include "worker_durable.h"

/* Set when a turn recorded ends mesh_exec_wait may be waiting for (broadcast after its flush). */
bool		exec_ended_this_turn = false;

/*
 * WAL this turn of the loop must make durable before any request or message
 * goes out: every commit the turn deferred that must be on disk first (the
 * moves that come before a backend call, the results its callers are about
 * to hear of), so one flush covers every call of the turn.  written_wanted:
 * commits that need only be written before the requests leave (an ordinary
 * exec's row: the flush of its result takes it to disk).  reply_wanted:
 * commits that must be on disk before the turn's messages go out but not
 * before its requests (an exec's result), which may wait a little for other
 * calls' results to share their flush (group commit, gather_until).
 */
static XLogRecPtr durable_wanted = InvalidXLogRecPtr;
static XLogRecPtr written_wanted = InvalidXLogRecPtr;
static XLogRecPtr reply_wanted = InvalidXLogRecPtr;
static TimestampTz gather_until = 0;

/*
 * What the call committed up to lsn must be on disk before the loop sends
 * the requests the turn started and the messages it queued.
 */
void
worker_want_durable(XLogRecPtr lsn)
{
	if (lsn > durable_wanted)
		durable_wanted = lsn;
}

/*
 * What the call committed up to lsn must be written (not yet flushed)
 * before the loop sends the requests the turn started.
 */
void
worker_want_written(XLogRecPtr lsn)
{
	if (lsn > written_wanted)
		written_wanted = lsn;
}

/*
 * What the call committed up to lsn (a result) must be on disk before any
 * message of the loop goes out; the requests may leave first.  The flush
 * may wait up to mesh.worker_group_commit_delay for other results.
 */
void
worker_want_reply_durable(XLogRecPtr lsn)
{
	if (lsn > reply_wanted)
		reply_wanted = lsn;
}

/*
 * Could a result that shares this turn's flush commit soon: does a call of
 * this worker (self, own_open_calls) or of another still wait for its answer?  With none, waiting
 * only delays the reply (a lone client never waits).
 */
static bool
others_may_commit(int self, uint32 own_open_calls)
{
	if (own_open_calls > 0)
		return true;
	for (int i = 0; i < mesh_shared->nworkers; i++)
		if (i != self && pg_atomic_read_u32(&mesh_shared->workers[i].open_calls) > 0)
			return true;
	return false;
}

/*
 * Make this turn's commits durable, or written where that is all they need:
 * one flush and one write at most, whatever the number of calls.  Runs
 * before the turn's requests are put on the wire (they only leave in
 * mesh_http_drive), so a command never runs without its exec row in the
 * WAL files, whatever process crashes.  Results (reply_wanted) may wait
 * for a flush: up to mesh.worker_group_commit_delay while other calls are
 * in progress, so that one fdatasync covers the results of several calls,
 * of this worker's and, since the flush goes to the end of the WAL
 * inserted so far, of the other workers' (whose own flush then finds its
 * commits on disk and costs nothing).  *may_reply: the messages queued may
 * go out now; false, they wait for a later turn's flush.  Returns the time
 * taken, in ns.
 */
uint64
worker_make_turn_durable(int self, uint32 own_open_calls, bool *may_reply)
{
	uint64		ns = 0;
	XLogRecPtr	flush = durable_wanted;

	*may_reply = true;
	if (reply_wanted != InvalidXLogRecPtr && durable_wanted < reply_wanted &&
		GetFlushRecPtr(NULL) < reply_wanted)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (gather_until == 0)
			gather_until = TimestampTzPlusMilliseconds(now, mesh_worker_group_commit_delay_ms);
		if (now < gather_until && others_may_commit(self, own_open_calls))
			*may_reply = false;
		else
			flush = reply_wanted;
	}
	if (flush != InvalidXLogRecPtr && mesh_worker_group_commit_delay_ms > 0)
	{
		/* what the other workers committed meanwhile goes with it, at no cost */
		XLogRecPtr	inserted = GetXLogInsertRecPtr();

		/*
		 * At the start of a page the insert position points past the page's
		 * header, which is not written yet: flushing there is asking past the
		 * end of the WAL.  Whatever ends within a header's length of the page
		 * start is left to its own flush.
		 */
		if (inserted % XLOG_BLCKSZ <= SizeOfXLogLongPHD)
			inserted -= inserted % XLOG_BLCKSZ;
		if (inserted > flush)
			flush = inserted;
	}
	if (written_wanted > flush)
		ns += mesh_write_to(written_wanted);
	ns += mesh_flush_to(flush);
	durable_wanted = InvalidXLogRecPtr;
	written_wanted = InvalidXLogRecPtr;
	if (*may_reply || (flush != InvalidXLogRecPtr && flush >= reply_wanted))
	{
		*may_reply = true;
		reply_wanted = InvalidXLogRecPtr;
		gather_until = 0;
	}
	return ns;
}

/* How long the loop may sleep while replies wait for a shared flush (-1: none wait). */
long
worker_gather_timeout(void)
{
	long		left;

	if (gather_until == 0)
		return -1;
	left = (long) ((gather_until - GetCurrentTimestamp() + 999) / 1000);
	/* look again within a millisecond: another worker's flush may cover the replies */
	return Min(Max(left, 0L), 1L);
}
