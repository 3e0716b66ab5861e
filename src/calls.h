/*-------------------------------------------------------------------------
 *
 * calls.h
 *	  The typed hand-off: what a caller asks a mesh worker, and what the
 *	  worker answers, per operation.
 *
 * Every message between a caller and a worker -- the request in the call
 * segment, each notice and the final reply on the call's shm_mq -- is one
 * flat message: a MeshMsgHeader, the operation's fixed struct, then the
 * bytes its MeshSpans point at (strings, each NUL-terminated; lists of
 * spans).  Offsets, never pointers: caller and worker map the segment at
 * different addresses, and a reply is read where shm_mq left it.  Large
 * payloads (stdin, a file's content) travel beside the message, never
 * copied into it: a request's in the call segment's blob (handoff.c), a
 * reply's as the second part of the same shm_mq message.
 *
 * Built and read by src/calls.c; no JSON on either side of the hand-off.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_CALLS_H
#define MESH_CALLS_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

/* Identifiers (run_id, agent_id, ...) are at most this long (api.c checks). */
#define MESH_MAX_ID_BYTES 255

/* The longest timeout a command may have, extensions included: 7 days. */
#define MESH_MAX_TIMEOUT_MS (7L * 24 * 3600 * 1000)

typedef enum MeshOp
{
	MESH_OP_ACQUIRE = 1,		/* declare a run's workspace (no backend call) */
	MESH_OP_EXEC,
	MESH_OP_READ_FILE,
	MESH_OP_WRITE_FILE,
	MESH_OP_RELEASE,
	MESH_OP_SNAPSHOT,			/* capture the run's /workspace (mesh_snapshot) */
	MESH_OP_SWEEP,				/* to the reaper: sweep now, reply with what it did */
	MESH_OP_EXEC_START,			/* start a background command (mesh_exec_start) */
	MESH_OP_EXEC_KILL,			/* signal a running command (mesh_exec_kill) */
	MESH_OP_EXEC_FOLLOW,		/* the worker's own: follow a background command again */
	MESH_OP_EXEC_EXTEND			/* move a running command's deadline (mesh_exec_extend) */
} MeshOp;

#define MESH_OP_COUNT (MESH_OP_EXEC_EXTEND + 1)

typedef enum MeshMsgKind
{
	MESH_MSG_REQUEST = 1,		/* caller -> worker: the operation's request */
	MESH_MSG_NOTICE,			/* worker -> caller: raise as NOTICE, keep waiting */
	MESH_MSG_ERROR,				/* worker -> caller, final: raise as ERROR */
	MESH_MSG_REPLY				/* worker -> caller, final: the operation's result */
} MeshMsgKind;

/* Bytes inside a message: from its start; len -1 is SQL NULL. */
typedef struct MeshSpan
{
	uint32		off;
	int32		len;
} MeshSpan;

/*
 * Where the worker's time on a call went, in nanoseconds, sent in the final
 * message; the caller adds its own stages and counts them (stages.c).
 */
typedef struct MeshCallTimes
{
	uint64		handoff_ns;		/* caller queued the call -> worker took it */
	uint64		worker_txn_ns;	/* in the worker's own transactions and flushes */
	uint64		http_ns;		/* backend requests: sent -> response received */
	uint64		replied_at_ns;	/* when the worker queued the final message */
	uint32		backend;		/* the backend's row in mesh.stat_backends (stats.c); 0: none */
} MeshCallTimes;

typedef struct MeshMsgHeader
{
	uint16		kind;			/* MeshMsgKind */
	uint16		op;				/* MeshOp */
	uint32		fixed_size;		/* size of the struct that follows */
	MeshCallTimes times;		/* final messages only */
} MeshMsgHeader;

/*--------------------------------------------------------------------------
 * Requests.  The run's id is not here: it is in the call's header.
 *--------------------------------------------------------------------------
 */
typedef struct MeshAcquireRequest
{
	MeshSpan	agent_id;
	MeshSpan	actor_id;
	MeshSpan	parent_run_id;	/* NULL: a top-level run */
	MeshSpan	environment;	/* NULL: no grants */
	MeshSpan	project;		/* NULL: the run names no project */
	bool		has_from_snapshot;	/* the run starts from snapshot from_snapshot */
	int64		from_snapshot;
} MeshAcquireRequest;

typedef struct MeshExecRequest
{
	MeshSpan	argv;			/* list of argc strings */
	MeshSpan	env;			/* list of name, value, name, value, ...; NULL: none */
	MeshSpan	dir;			/* NULL: the workspace root */
	int32		argc;
	int32		nenv;			/* variables, so the env list has 2 * nenv spans */
	bool		has_stdin;		/* stdin is the call's blob */
	int64		timeout_ms;
	int32		max_output;		/* bytes of each stream kept */
	bool		eval;			/* mesh_eval: argv is [language, code], stdin the input */
} MeshExecRequest;

/* mesh_exec_kill: the exec (of the call's run) and the signal's name */
typedef struct MeshKillRequest
{
	int64		exec_id;
	MeshSpan	signal;
} MeshKillRequest;

/* mesh_exec_extend: the exec (of the call's run) and how much later its deadline moves */
typedef struct MeshExtendRequest
{
	int64		exec_id;
	int64		by_ms;
} MeshExtendRequest;

/*
 * The worker's own call, at its start, for a background command its
 * predecessor followed: where it had got to (mesh.background_execs).
 */
typedef struct MeshFollowRequest
{
	int64		exec_id;
	int64		timeout_ms;
	TimestampTz started_at;
	int64		stored[2];		/* stdout, stderr: bytes stored (stdout_bytes) */
	int64		read[2];		/* ... and read from the backend (stdout_read) */
} MeshFollowRequest;

/* read and write; a write's content is the call's blob */
typedef struct MeshFileRequest
{
	MeshSpan	path;
	int32		mode;
} MeshFileRequest;

/* mesh_snapshot's request is its header alone: the run's id says what to capture */

typedef struct MeshReleaseRequest
{
	MeshSpan	reason;			/* NULL: the caller gave none */
	bool		idle;			/* the reaper's: hibernate if the backend can */
} MeshReleaseRequest;

typedef union MeshRequest
{
	MeshAcquireRequest acquire;
	MeshExecRequest exec;
	MeshFileRequest file;
	MeshReleaseRequest release;
	MeshKillRequest kill;
	MeshFollowRequest follow;
	MeshExtendRequest extend;
} MeshRequest;

/*--------------------------------------------------------------------------
 * Replies
 *--------------------------------------------------------------------------
 */

/*
 * A row as the composite datum the worker's statement returned: acquire's
 * mesh.workspaces row, snapshot's mesh.snapshots row.
 */
typedef struct MeshRowReply
{
	MeshSpan	row;
} MeshRowReply;

typedef struct MeshExecReply
{
	int64		exec_id;
	int64		stdout_bytes;	/* each stream's length as stored (mesh_exec_output's offsets) */
	int64		stderr_bytes;
	int32		exit_code;
	bool		truncated;
	MeshSpan	status;
	MeshSpan	stdout_text;
	MeshSpan	stderr_text;
} MeshExecReply;

/* mesh_exec_kill: whether a signal went to a running command */
typedef struct MeshKillReply
{
	bool		signalled;
} MeshKillReply;

/* mesh_exec_extend: the command's new deadline */
typedef struct MeshExtendReply
{
	TimestampTz deadline;
	int64		timeout_ms;		/* its whole timeout now, as mesh.execs records it */
} MeshExtendReply;

typedef struct MeshReadReply
{
	MeshSpan	content;
} MeshReadReply;

typedef struct MeshReleaseReply
{
	MeshSpan	outcome;
} MeshReleaseReply;

#define MESH_SWEEP_COLUMNS 4	/* action, run_id, backend, detail */

typedef struct MeshSweepReply
{
	int32		nrows;
	MeshSpan	cells;			/* list of nrows * MESH_SWEEP_COLUMNS strings */
} MeshSweepReply;

typedef struct MeshErrorReply
{
	int32		sqlerrcode;		/* as MAKE_SQLSTATE */
	MeshSpan	message;
	MeshSpan	detail;
	MeshSpan	hint;
} MeshErrorReply;

typedef struct MeshNoticeReply
{
	MeshSpan	message;
} MeshNoticeReply;

/* A message as received: where it lies, and its header. */
typedef struct MeshMsg
{
	const char *base;
	Size		len;
	const MeshMsgHeader *hdr;
} MeshMsg;

/* building (either side) */
extern void mesh_msg_begin(StringInfo buf, MeshMsgKind kind, MeshOp op, Size fixed_size);
extern MeshSpan mesh_msg_add_bytes(StringInfo buf, const char *data, Size len);
extern MeshSpan mesh_msg_add_string(StringInfo buf, const char *s);
extern MeshSpan mesh_msg_add_list(StringInfo buf, int n);
extern void mesh_msg_set_list_item(StringInfo buf, MeshSpan list, int i, MeshSpan item);
extern void mesh_msg_set_fixed(StringInfo buf, const void *fixed, Size fixed_size);
extern void mesh_msg_set_times(StringInfo buf, const MeshCallTimes *times);
extern void mesh_msg_error(StringInfo buf, MeshOp op, int sqlerrcode, const char *message,
						   const char *detail, const char *hint);
extern void mesh_msg_notice(StringInfo buf, MeshOp op, const char *message);

/* reading (either side) */
extern void mesh_msg_parse(const char *data, Size len, MeshMsg *msg);
extern const void *mesh_msg_fixed(const MeshMsg *msg, Size fixed_size);
extern const char *mesh_msg_string(const MeshMsg *msg, MeshSpan span);
extern Size mesh_msg_bytes(const MeshMsg *msg, MeshSpan span, const char **data);
extern MeshSpan mesh_msg_list_item(const MeshMsg *msg, MeshSpan list, int i);

#endif							/* MESH_CALLS_H */
