/*-------------------------------------------------------------------------
 *
 * docker_api.c
 *	  The Engine API framing every docker operation is built from: requests
 *	  to the daemon's socket, its errors, exec creation and start, the
 *	  multiplexed stream, the driver's script execs, and tar archives.
 *
 * docker.c, docker_exec.c and docker_files.c build their state machines
 * from these helpers (docker_api.h), so each speaks to the daemon one way.
 * Pure request builders and response parsers: no I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <time.h>

#include "lib/stringinfo.h"

#include "backends/backend.h"
#include "backends/docker_api.h"

#define DOCKER_API "/v1.41"
#define DOCKER_DEFAULT_REQUEST_TIMEOUT_MS 60000
#define DOCKER_DEFAULT_USER "1000:1000"
#define TAR_BLOCK 512

/* The workspace user as configured: every exec and archive entry runs or is owned as it. */
const char *
docker_config_user(const MeshBackend *be)
{
	json_t	   *user = json_object_get(be->config, "user");

	return user ? json_string_value(user) : DOCKER_DEFAULT_USER;
}

/*--------------------------------------------------------------------------
 * Requests and errors
 *--------------------------------------------------------------------------
 */

/* Start a request to the daemon: socket, API version, deadline. */
void
docker_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method, const char *path)
{
	json_t	   *timeout = json_object_get(be->config, "request_timeout_ms");

	memset(req, 0, sizeof(*req));
	req->method = method;
	req->url = psprintf("http://localhost" DOCKER_API "%s", path);
	req->unix_socket = pstrdup(json_string_value(json_object_get(be->config, "socket")));
	req->timeout_ms = timeout ? (long) json_integer_value(timeout) : DOCKER_DEFAULT_REQUEST_TIMEOUT_MS;
}

/* Docker's own error text ({"message": ...}), trimmed, or "". */
char *
docker_message(const MeshHttpResponse *resp)
{
	json_t	   *doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
	const char *message = NULL;
	char	   *copy;

	if (doc)
		json_unpack(doc, "{s?s}", "message", &message);
	copy = pstrdup(message ? message : "");
	if (doc)
		json_decref(doc);
	return copy;
}

/*
 * Whether the daemon answered 2xx; otherwise set err with the backend's
 * name, what was being done, and the daemon's message.  A socket that does
 * not answer is reported by the shared helper (daemon down).
 */
bool
docker_ok(const MeshHttpResponse *resp, const MeshBackend *be, const char *doing, MeshError *err)
{
	if (resp->transport_error)
		return mesh_http_error_from_json(resp, be->name, err);
	if (resp->status >= 200 && resp->status < 300)
		return true;
	mesh_error_set(err, mesh_failure_for_http_status(resp->status),
				   "backend \"%s\" (Docker) could not %s: HTTP %ld: %s",
				   be->name, doing, resp->status, docker_message(resp));
	return false;
}

json_t *
docker_parse_object(const MeshHttpResponse *resp, const MeshBackend *be, MeshError *err)
{
	json_t	   *doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);

	if (doc && (json_is_object(doc) || json_is_array(doc)))
		return doc;
	if (doc)
		json_decref(doc);
	mesh_error_set(err, MESH_FAIL_PROTOCOL,
				   "backend \"%s\" (Docker) answered with a body that is not JSON", be->name);
	return NULL;
}

DockerOp *
docker_op_new(MeshOpState *st, const char *ref)
{
	DockerOp   *op = palloc0(sizeof(DockerOp));

	op->ref = pstrdup(ref);
	st->data = op;
	return op;
}

/*--------------------------------------------------------------------------
 * Tar (ustar) for the archive API
 *--------------------------------------------------------------------------
 */

/* Write an octal field of width w (w-1 digits and a NUL), as ustar wants. */
static void
tar_octal(char *field, int width, unsigned long long value)
{
	snprintf(field, width, "%0*llo", width - 1, value);
}

/* One ustar header block: name (<= 100 bytes), type, mode, owner, size. */
void
docker_tar_header(StringInfo tar, const char *name, char type, int mode, const char *user, size_t size)
{
	char		h[TAR_BLOCK];
	unsigned int sum = 0;
	unsigned long uid = strtoul(user, NULL, 10);
	unsigned long gid = strtoul(strchr(user, ':') + 1, NULL, 10);

	memset(h, 0, sizeof(h));
	memcpy(h, name, Min(strlen(name), 100));
	tar_octal(h + 100, 8, (unsigned) mode & 07777);
	tar_octal(h + 108, 8, uid);
	tar_octal(h + 116, 8, gid);
	tar_octal(h + 124, 12, size);
	tar_octal(h + 136, 12, (unsigned long long) (time(NULL)));
	memset(h + 148, ' ', 8);
	h[156] = type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += (unsigned char) h[i];
	snprintf(h + 148, 8, "%06o", sum);
	h[155] = ' ';
	appendBinaryStringInfo(tar, h, TAR_BLOCK);
}

/* Pad the archive to the next block boundary. */
static void
tar_pad(StringInfo tar)
{
	static const char zeros[TAR_BLOCK] = {0};

	if (tar->len % TAR_BLOCK)
		appendBinaryStringInfo(tar, zeros, TAR_BLOCK - tar->len % TAR_BLOCK);
}

/* A regular file entry; a name over 100 bytes travels in a pax header. */
void
docker_tar_file(StringInfo tar, const char *name, int mode, const char *user, const char *data, size_t len)
{
	if (strlen(name) > 100)
	{
		/* "<len> path=<name>\n", where <len> counts itself */
		size_t		body = strlen(" path=\n") + strlen(name);
		size_t		total = body + 1;
		char	   *record;

		while (total != body + strlen(psprintf("%zu", total)))
			total = body + strlen(psprintf("%zu", total));
		record = psprintf("%zu path=%s\n", total, name);
		docker_tar_header(tar, "././@PaxHeader", 'x', 0644, user, strlen(record));
		appendStringInfoString(tar, record);
		tar_pad(tar);
	}
	docker_tar_header(tar, name, '0', mode, user, len);
	appendBinaryStringInfo(tar, data, len);
	tar_pad(tar);
}

/* Two zero blocks end an archive. */
void
docker_tar_end(StringInfo tar)
{
	static const char zeros[2 * TAR_BLOCK] = {0};

	appendBinaryStringInfo(tar, zeros, sizeof(zeros));
}

static unsigned long long
tar_parse_octal(const char *field, int width)
{
	unsigned long long v = 0;

	for (int i = 0; i < width && field[i]; i++)
		if (field[i] >= '0' && field[i] <= '7')
			v = v * 8 + (unsigned) (field[i] - '0');
	return v;
}

/*
 * The first regular file of a tar stream; extended headers are skipped.
 * Returns false (with *is_file false) when the entry is not a regular file.
 */
bool
docker_tar_first_file(const char *tar, size_t len, const char **data, size_t *size, bool *is_file)
{
	size_t		off = 0;

	*is_file = false;
	while (off + TAR_BLOCK <= len)
	{
		const char *h = tar + off;
		unsigned long long n = tar_parse_octal(h + 124, 12);
		char		type = h[156];

		if (h[0] == '\0')
			return false;		/* end of archive */
		off += TAR_BLOCK;
		if (type == '0' || type == '\0')
		{
			if (n > len - off)
				return false;
			*data = tar + off;
			*size = (size_t) n;
			*is_file = true;
			return true;
		}
		if (type != 'x' && type != 'g' && type != 'L' && type != 'K')
			return false;
		off += (size_t) ((n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK);
	}
	return false;
}

/*--------------------------------------------------------------------------
 * Exec in a container: create, start (the multiplexed stream), inspect
 *--------------------------------------------------------------------------
 */

/*
 * POST /containers/{ref}/exec for an argv, as the workspace user; ATTACH:
 * its streams come back on the start's answer (else it is started detached).
 */
void
docker_exec_create_request(const MeshBackend *be, const char *ref, json_t *cmd, json_t *env,
					bool attach, MeshHttpRequest *req)
{
	json_t	   *body = json_pack("{s:b,s:b,s:b,s:o,s:s,s:s}",
								 "AttachStdin", 0, "AttachStdout", attach, "AttachStderr", attach,
								 "Cmd", cmd, "User", docker_config_user(be),
								 "WorkingDir", DOCKER_WORKSPACE);

	if (env)
		json_object_set_new(body, "Env", env);
	docker_begin(be, req, "POST", psprintf("/containers/%s/exec", mesh_url_encode(ref)));
	mesh_http_json_body(req, body);
}

/* ["sh", "-c", script, "mesh", args...] */
json_t *
docker_script_cmd(const char *script)
{
	return json_pack("[s,s,s,s]", "/bin/sh", "-c", script, "mesh");
}

/* The exec's id from a create answer, in op->exec_id. */
bool
docker_take_exec_id(const MeshBackend *be, DockerOp *op, const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc = docker_parse_object(resp, be, err);
	const char *id = NULL;

	if (doc == NULL)
		return false;
	json_unpack(doc, "{s?s}", "Id", &id);
	if (id == NULL || strspn(id, "0123456789abcdef") != strlen(id))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) created an exec without a usable id", be->name);
		return false;
	}
	op->exec_id = pstrdup(id);
	json_decref(doc);
	return true;
}

/*
 * POST /exec/{id}/start.  Attached: the body is the stream, until the
 * command ends.  Detached: the answer comes once the process is started.
 */
void
docker_exec_start_request(const MeshBackend *be, DockerOp *op, long extra_ms, bool detach,
				   MeshHttpRequest *req)
{
	docker_begin(be, req, "POST", psprintf("/exec/%s/start", op->exec_id));
	mesh_http_json_body(req, json_pack("{s:b,s:b}", "Detach", detach, "Tty", 0));
	req->timeout_ms += extra_ms;
}

/*
 * Split Docker's multiplexed stream (8-byte headers: stream, 3 zero bytes,
 * big-endian size) into stdout and stderr.
 */
bool
docker_demux(const char *buf, size_t len, StringInfo out, StringInfo err)
{
	size_t		off = 0;

	while (off < len)
	{
		const unsigned char *h = (const unsigned char *) buf + off;
		size_t		n;

		if (len - off < 8 || h[1] || h[2] || h[3] || h[0] > 2)
			return false;
		n = ((size_t) h[4] << 24) | ((size_t) h[5] << 16) | ((size_t) h[6] << 8) | h[7];
		if (n > len - off - 8)
			return false;
		appendBinaryStringInfo(h[0] == 2 ? err : out, buf + off + 8, n);
		off += 8 + n;
	}
	return true;
}

/*
 * The exec create of one of the driver's scripts with its arguments (a
 * NULL-terminated list), attached; its output lands in op->out and op->err
 * (docker_script_step).
 */
void
docker_script_request(const MeshBackend *be, DockerOp *op, const char *script, const char *const *args,
			   MeshHttpRequest *req)
{
	json_t	   *cmd = docker_script_cmd(script);

	for (; *args; args++)
		json_array_append_new(cmd, json_string(*args));
	if (op->out.data == NULL)
		initStringInfo(&op->out);
	if (op->err.data == NULL)
		initStringInfo(&op->err);
	op->phase = PH_EXEC_CREATE;
	docker_exec_create_request(be, op->ref, cmd, NULL, true, req);
}

/*
 * A script's two steps: its create, then its attached start, whose answer
 * (it may take EXTRA_MS longer than a plain call) is demultiplexed into
 * op->out and op->err.  NEXT after the create, DONE once the output is in;
 * DOING names the script's purpose in errors.
 */
MeshStepResult
docker_script_step(const MeshBackend *be, MeshOpState *st, DockerOp *op, const MeshHttpResponse *resp,
			const char *doing, long extra_ms, MeshError *err)
{
	if (op->phase == PH_EXEC_CREATE)
	{
		if (!docker_ok(resp, be, doing, err) || !docker_take_exec_id(be, op, resp, err))
			return MESH_STEP_FAILED;
		op->phase = PH_EXEC_START;
		docker_exec_start_request(be, op, extra_ms, false, &st->next);
		return MESH_STEP_NEXT;
	}
	Assert(op->phase == PH_EXEC_START);
	if (!docker_ok(resp, be, doing, err))
		return MESH_STEP_FAILED;
	if (!docker_demux(resp->body, resp->body_len, &op->out, &op->err))
	{
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) answered an exec to %s with a malformed stream",
					   be->name, doing);
		return MESH_STEP_FAILED;
	}
	return MESH_STEP_DONE;
}

/*
 * Whether a script's create found its container gone (404) or stopped
 * (409): for kill and forget there is then nothing left to do.
 */
bool
docker_container_absent(const DockerOp *op, const MeshHttpResponse *resp)
{
	return op->phase == PH_EXEC_CREATE && !resp->transport_error &&
		(resp->status == 404 || resp->status == 409);
}

/* A key names a directory of the driver's scratch: a plain name only. */
bool
docker_valid_key(const MeshBackend *be, const char *key, MeshError *err)
{
	if (docker_exec_key_valid(key))
		return true;
	mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
				   "backend \"%s\" (Docker): an exec key must be 1 to 64 letters, digits, \"_\", \"-\" or \".\" (not first)",
				   be->name);
	return false;
}

/* The first line a script printed, without its newline (in op->out). */
const char *
docker_script_verdict(DockerOp *op)
{
	op->out.data[strcspn(op->out.data, "\n")] = '\0';
	return op->out.data;
}
