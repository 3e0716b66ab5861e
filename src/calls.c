/*-------------------------------------------------------------------------
 *
 * calls.c
 *	  Building and reading the typed messages of the hand-off (calls.h).
 *
 * A message is built in a StringInfo: begin reserves the header and the
 * operation's fixed struct, the add functions append the bytes its spans
 * point at and return the spans, and set_fixed writes the finished struct
 * into its place (the buffer may move while growing, so nothing keeps a
 * pointer into it).  Reading checks every span against the message before
 * handing out a pointer into it, so a short or mismatched message is an
 * error, never a read past its end.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "calls.h"

#define FIXED_OFFSET MAXALIGN(sizeof(MeshMsgHeader))
#define NULL_SPAN ((MeshSpan) {0, -1})

/* Start a message of KIND for OP whose fixed struct has fixed_size bytes. */
void
mesh_msg_begin(StringInfo buf, MeshMsgKind kind, MeshOp op, Size fixed_size)
{
	MeshMsgHeader hdr = {0};

	hdr.kind = (uint16) kind;
	hdr.op = (uint16) op;
	hdr.fixed_size = (uint32) fixed_size;
	resetStringInfo(buf);
	appendBinaryStringInfo(buf, (char *) &hdr, sizeof(hdr));
	appendStringInfoSpaces(buf, FIXED_OFFSET - sizeof(hdr) + fixed_size);
	memset(buf->data + sizeof(hdr), 0, buf->len - sizeof(hdr));
}

/* Append LEN bytes and a NUL (so text is a C string in place); NULL data is SQL NULL. */
MeshSpan
mesh_msg_add_bytes(StringInfo buf, const char *data, Size len)
{
	MeshSpan	span;

	if (data == NULL)
		return NULL_SPAN;
	if (len > (Size) PG_INT32_MAX - 1)
		elog(ERROR, "mesh: %zu bytes do not fit a hand-off message", len);
	span.off = (uint32) buf->len;
	span.len = (int32) len;
	appendBinaryStringInfo(buf, data, (int) len);
	appendStringInfoChar(buf, '\0');
	return span;
}

MeshSpan
mesh_msg_add_string(StringInfo buf, const char *s)
{
	return mesh_msg_add_bytes(buf, s, s ? strlen(s) : 0);
}

/* Reserve a list of N spans, all NULL until set. */
MeshSpan
mesh_msg_add_list(StringInfo buf, int n)
{
	MeshSpan	list;

	/* spans are read in place: align the list */
	appendStringInfoSpaces(buf, (int) (TYPEALIGN(ALIGNOF_INT, buf->len) - buf->len));
	list.off = (uint32) buf->len;
	list.len = (int32) (n * sizeof(MeshSpan));
	for (int i = 0; i < n; i++)
		appendBinaryStringInfo(buf, (char *) &NULL_SPAN, sizeof(MeshSpan));
	return list;
}

void
mesh_msg_set_list_item(StringInfo buf, MeshSpan list, int i, MeshSpan item)
{
	Assert(list.len >= 0 && (i + 1) * sizeof(MeshSpan) <= (Size) list.len);
	memcpy(buf->data + list.off + i * sizeof(MeshSpan), &item, sizeof(MeshSpan));
}

/* Write the finished fixed struct into the place begin reserved for it. */
void
mesh_msg_set_fixed(StringInfo buf, const void *fixed, Size fixed_size)
{
	Assert(((MeshMsgHeader *) buf->data)->fixed_size == fixed_size);
	memcpy(buf->data + FIXED_OFFSET, fixed, fixed_size);
}

void
mesh_msg_set_times(StringInfo buf, const MeshCallTimes *times)
{
	memcpy(&((MeshMsgHeader *) buf->data)->times, times, sizeof(MeshCallTimes));
}

/* An error for the caller to raise, with its SQLSTATE, detail and hint. */
void
mesh_msg_error(StringInfo buf, MeshOp op, int sqlerrcode, const char *message,
			   const char *detail, const char *hint)
{
	MeshErrorReply e;

	mesh_msg_begin(buf, MESH_MSG_ERROR, op, sizeof(e));
	e.sqlerrcode = sqlerrcode;
	e.message = mesh_msg_add_string(buf, message);
	e.detail = mesh_msg_add_string(buf, detail);
	e.hint = mesh_msg_add_string(buf, hint);
	mesh_msg_set_fixed(buf, &e, sizeof(e));
}

void
mesh_msg_notice(StringInfo buf, MeshOp op, const char *message)
{
	MeshNoticeReply n;

	mesh_msg_begin(buf, MESH_MSG_NOTICE, op, sizeof(n));
	n.message = mesh_msg_add_string(buf, message);
	mesh_msg_set_fixed(buf, &n, sizeof(n));
}

/* Take a received message: its header must be whole. */
void
mesh_msg_parse(const char *data, Size len, MeshMsg *msg)
{
	const MeshMsgHeader *hdr = (const MeshMsgHeader *) data;

	if (len < FIXED_OFFSET || hdr->fixed_size > len - FIXED_OFFSET)
		elog(ERROR, "mesh: a hand-off message of %zu bytes is too short", len);
	msg->base = data;
	msg->len = len;
	msg->hdr = hdr;
}

/* The message's fixed struct, which must be the size the reader expects. */
const void *
mesh_msg_fixed(const MeshMsg *msg, Size fixed_size)
{
	if (msg->hdr->fixed_size != fixed_size)
		elog(ERROR, "mesh: a hand-off message of kind %d for operation %d has a fixed part of %u bytes, not %zu",
			 msg->hdr->kind, msg->hdr->op, msg->hdr->fixed_size, fixed_size);
	return msg->base + FIXED_OFFSET;
}

/* The bytes a span points at, checked to lie inside the message; -1 for NULL. */
Size
mesh_msg_bytes(const MeshMsg *msg, MeshSpan span, const char **data)
{
	if (span.len < 0)
	{
		*data = NULL;
		return 0;
	}
	if (span.off < FIXED_OFFSET || span.off > msg->len || (Size) span.len > msg->len - span.off)
		elog(ERROR, "mesh: a hand-off message points outside itself");
	*data = msg->base + span.off;
	return (Size) span.len;
}

/* A string span as a C string in place (NULL for SQL NULL). */
const char *
mesh_msg_string(const MeshMsg *msg, MeshSpan span)
{
	const char *s;
	Size		len = mesh_msg_bytes(msg, span, &s);

	if (s == NULL)
		return NULL;
	if (span.off + len >= msg->len || s[len] != '\0' || memchr(s, '\0', len) != NULL)
		elog(ERROR, "mesh: a hand-off message holds a malformed string");
	return s;
}

/* Item i of a list of spans. */
MeshSpan
mesh_msg_list_item(const MeshMsg *msg, MeshSpan list, int i)
{
	const char *items;
	Size		len = mesh_msg_bytes(msg, list, &items);
	MeshSpan	item;

	if (items == NULL || i < 0 || (Size) (i + 1) * sizeof(MeshSpan) > len)
		elog(ERROR, "mesh: a hand-off message has a short list");
	memcpy(&item, items + i * sizeof(MeshSpan), sizeof(MeshSpan));
	return item;
}
