/*-------------------------------------------------------------------------
 *
 * worker_reply.c
 *	  A worker's messages to its callers: notices, replies, errors, queued
 *	  per call and sent (stamped with the call's times) once the turn that
 *	  made them is durable (worker_durable.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/shm_mq.h"

#include "handoff.h"
#include "txn.h"
#include "worker_call.h"
#include "worker_failures.h"
#include "worker_reply.h"

/*
 * A message for the caller: the typed message (calls.h), then the blob (a file's bytes)
 * sent from where it already lies, so a file is not copied into the message.
 */
typedef struct OutMessage
{
	StringInfo	head;
	const char *blob;
	Size		blob_len;
	bool		final;			/* the reply or error: stamped with the call's times when sent */
} OutMessage;

/*--------------------------------------------------------------------------
 * Replies
 *--------------------------------------------------------------------------
 */

/* The time spent in transactions since the last mark is this call's. */
void
worker_settle_txn_time(WorkerCall *call)
{
	call->times.worker_txn_ns += mesh_txn_time_ns - call->txn_mark;
	call->txn_mark = mesh_txn_time_ns;
}

/*
 * Queue a built message for the caller; sent by worker_flush_outbox().  The blob
 * is not copied: it must live as long as the call (a read's body is kept
 * with the driver run's last response, see free_call).
 */
static void
queue_message(WorkerCall *call, StringInfo head, const char *blob, Size blob_len, bool final)
{
	OutMessage *msg = palloc(sizeof(OutMessage));

	msg->head = head;
	msg->blob = blob;
	msg->blob_len = blob_len;
	msg->final = final;
	call->outbox = lappend(call->outbox, msg);
}

/* A NOTICE for the caller, raised there while it keeps waiting. */
void
queue_notice(WorkerCall *call, const char *text)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_notice(head, call->op, text);
	queue_message(call, head, NULL, 0, false);
}

/* A reply of the call's operation, its fixed struct still to be set. */
StringInfo
begin_reply(WorkerCall *call, Size fixed_size)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_begin(head, MESH_MSG_REPLY, call->op, fixed_size);
	return head;
}

/* Queue the call's final message (a reply or an error); its timings go with it when sent. */
void
finish_with(WorkerCall *call, StringInfo head, const char *blob, Size blob_len)
{
	worker_settle_txn_time(call);
	queue_message(call, head, blob, blob_len, true);
	call->step = STEP_FINISHED;
}

/*
 * A reply that is a row (declare's mesh.workspaces, a capture's
 * mesh.snapshots), as the composite datum the statement returned: encoded
 * once, returned by the caller as it is.
 */
void
reply_row(WorkerCall *call, Datum row)
{
	StringInfo	head = begin_reply(call, sizeof(MeshRowReply));
	MeshRowReply r;

	r.row = mesh_msg_add_bytes(head, DatumGetPointer(row), VARSIZE(DatumGetPointer(row)));
	mesh_msg_set_fixed(head, &r, sizeof(r));
	finish_with(call, head, NULL, 0);
}

/* A reply without fields (a file write's). */
void
reply_done(WorkerCall *call)
{
	finish_with(call, begin_reply(call, 0), NULL, 0);
}

void
reply_error(WorkerCall *call, int sqlerrcode, const char *message,
			const char *detail, const char *hint)
{
	StringInfo	head = makeStringInfo();

	mesh_msg_error(head, call->op, sqlerrcode, message, detail, hint);
	finish_with(call, head, NULL, 0);
}

/*
 * Pass a failed transaction's error on to the caller.  A lock timeout means
 * some transaction, quite possibly the caller's own, holds a lock on mesh's
 * rows: say so instead of hanging both processes.
 */
void
reply_txn_error(WorkerCall *call, ErrorData *err)
{
	if (err->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		reply_error(call, ERRCODE_LOCK_NOT_AVAILABLE,
					psprintf("mesh worker could not lock the workspace of run \"%s\" within mesh.worker_lock_timeout",
							 call->run_id),
					"Another transaction holds a lock on mesh's tables.",
					"If the calling transaction itself locked mesh tables, commit or roll it back before calling mesh functions.");
	else
		reply_error(call, err->sqlerrcode, err->message, err->detail, err->hint);
	FreeErrorData(err);
}

/*
 * A backend's refusal, in the caller's terms: what failed (what, or the
 * call's operation when NULL), for which run, and the backend's own words;
 * its HTTP status and error code go to the detail.  Without an answer
 * (unreachable) the transport's words say it.
 */
void
reply_backend_error(WorkerCall *call, const char *what, const MeshError *err)
{
	if (err->reason == NULL)
		reply_error(call, failure_sqlerrcode(err->failure), err->message, NULL,
					failure_hint(err->failure));
	else
		reply_error(call, failure_sqlerrcode(err->failure),
					psprintf("%s of run \"%s\" failed on backend \"%s\": %s", what ? what : call->def->noun,
							 call->run_id, call->ws.backend_kind ? call->ws.backend_kind : "?",
							 err->reason),
					err->message, failure_hint(err->failure));
}

/*
 * Send what can be sent now; the rest waits for the caller to read.  The
 * final message carries the call's times, the WAL flush its result waited
 * for (flush_ns, this turn's) counted as a worker transaction's.
 */
void
worker_flush_outbox(WorkerCall *call, uint64 flush_ns)
{
	while (call->outbox != NIL && !call->caller_gone)
	{
		OutMessage *msg = (OutMessage *) linitial(call->outbox);
		shm_mq_iovec parts[2] = {{msg->head->data, msg->head->len}, {msg->blob, msg->blob_len}};
		shm_mq_result res;

		if (msg->final && call->times.replied_at_ns == 0)
		{
			call->times.worker_txn_ns += flush_ns;
			call->times.replied_at_ns = mesh_clock_ns();
			call->times.backend = mesh_stat_backend(call->be.driver ? call->be.name : NULL);
			mesh_stat_worker_activity(worker_index, true);	/* counted before its caller can look */
			mesh_msg_set_times(msg->head, &call->times);
		}
		/* after WOULD_BLOCK, the same parts again: the queue remembers how far it got */
		res = shm_mq_sendv(call->mqh, parts, msg->blob_len > 0 ? 2 : 1, true, true);

		if (res == SHM_MQ_WOULD_BLOCK)
			return;
		if (res == SHM_MQ_DETACHED)
			call->caller_gone = true;
		call->outbox = list_delete_first(call->outbox);
	}
}
