/*-------------------------------------------------------------------------
 *
 * sandboxd_parse.c
 *	  Reader of mesh-sandboxd's framed exec answers, free of the server runtime.
 *
 * The framing (docs/protocol.md, "Output tail" and "Background execs"):
 * one JSON object on the first line; when it carries stdout_kept and
 * stderr_kept, exactly that many raw bytes of each stream follow the line,
 * stdout first, and nothing else.  Anything else is not an answer.  See
 * sandboxd_parse.h for why this file uses jansson alone.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "backends/sandboxd_parse.h"

/* A non-negative integer field, or -1 when absent or anything else. */
static int64_t
count_field(json_t *doc, const char *field)
{
	json_t	   *value = json_object_get(doc, field);

	return json_is_integer(value) && json_integer_value(value) >= 0
		? (int64_t) json_integer_value(value) : -1;
}

/*
 * Splits BODY into its document and raw streams.  False (nothing to free)
 * when the first line is not a JSON object or the bytes after it are not
 * what it announced.  A body without raw streams (an older daemon's base64
 * answer) is its whole self the document.
 */
bool
sandboxd_frame_read(const char *body, size_t len, SandboxdFrame *frame)
{
	const char *newline = body ? memchr(body, '\n', len) : NULL;
	size_t		line = newline ? (size_t) (newline - body) : len;
	int64_t		out;
	int64_t		err;

	memset(frame, 0, sizeof(*frame));
	frame->doc = json_loadb(body ? body : "", line, 0, NULL);
	if (frame->doc == NULL || !json_is_object(frame->doc))
	{
		json_decref(frame->doc);
		frame->doc = NULL;
		return false;
	}
	if (json_object_get(frame->doc, "stdout_kept") == NULL &&
		json_object_get(frame->doc, "stderr_kept") == NULL)
		return true;
	out = count_field(frame->doc, "stdout_kept");
	err = count_field(frame->doc, "stderr_kept");
	if (newline == NULL || out < 0 || err < 0 ||
		(uint64_t) out + (uint64_t) err != len - line - 1)
	{
		json_decref(frame->doc);
		frame->doc = NULL;
		return false;
	}
	frame->raw = true;
	frame->stdout_data = newline + 1;
	frame->stdout_len = (size_t) out;
	frame->stderr_data = newline + 1 + out;
	frame->stderr_len = (size_t) err;
	return true;
}

/*
 * A background exec's answer: running, and for each stream where its bytes
 * start and how many were written in all.  False when a field is missing or
 * the numbers contradict each other (bytes past the total).
 */
bool
sandboxd_progress_read(const SandboxdFrame *frame, SandboxdProgress *progress)
{
	json_t	   *running = json_object_get(frame->doc, "running");
	json_t	   *error = json_object_get(frame->doc, "error");

	memset(progress, 0, sizeof(*progress));
	if (!frame->raw || !json_is_boolean(running))
		return false;
	progress->running = json_is_true(running);
	progress->stdout_from = count_field(frame->doc, "stdout_from");
	progress->stderr_from = count_field(frame->doc, "stderr_from");
	progress->stdout_total = count_field(frame->doc, "stdout_bytes");
	progress->stderr_total = count_field(frame->doc, "stderr_bytes");
	if (progress->stdout_from < 0 || progress->stderr_from < 0 ||
		progress->stdout_total < 0 || progress->stderr_total < 0 ||
		(uint64_t) progress->stdout_from + frame->stdout_len > (uint64_t) progress->stdout_total ||
		(uint64_t) progress->stderr_from + frame->stderr_len > (uint64_t) progress->stderr_total)
		return false;
	if (!progress->running && error != NULL)
	{
		json_t	   *message = json_object_get(error, "message");

		progress->error_code = json_string_value(json_object_get(error, "code"));
		if (progress->error_code == NULL)
			return false;
		progress->error_message = json_is_string(message) ? json_string_value(message) : "";
	}
	return true;
}
