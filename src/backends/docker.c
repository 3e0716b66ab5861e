/*-------------------------------------------------------------------------
 *
 * docker.c
 *	  Driver for the Docker Engine API (API version 1.41, over a unix socket).
 *
 * A workspace is a container from the configured image: no network, the size
 * tier's memory/CPU/pids limits, a read-only root, all capabilities dropped,
 * no-new-privileges, an unprivileged user, and two anonymous volumes: the
 * workspace (/workspace) and the driver's own scratch (/run/mesh), both owned
 * by that user in the image (the archive API writes only into volumes when
 * the root is read-only).
 *
 * Config (mesh.backends.config):
 *	  {"socket": "/var/run/docker.sock", "image": "name:tag"}	required
 *	  optional: "user": "uid:gid" (numeric, default 1000:1000),
 *				"release": "destroy" | "hibernate" (stop and keep the container),
 *				"request_timeout_ms"
 *
 * The image needs a POSIX sh with sleep, setsid, kill, head, tail, wc,
 * readlink -f and mkdir -p (busybox is enough): commands run under a small
 * wrapper (exec_wrapper below) that enforces the timeout by killing the
 * command's process group, clamps output and reports what happened on a
 * trailer at the end of stderr.  Stdin travels as a file through the archive
 * API, because this transport cannot hijack the exec connection.
 *
 * Background commands (spec->background) run under a wrapper of their own
 * that a detached exec starts; their scripts and the reader of their output
 * live in docker_background.c (docker.h).
 *
 * Every operation is a state machine over pure request builders and response
 * parsers (see backend.h): no I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <time.h>

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "backends/backend.h"
#include "backends/docker.h"

#define DOCKER_API "/v1.41"
#define DOCKER_DEFAULT_REQUEST_TIMEOUT_MS 60000
#define DOCKER_DEFAULT_USER "1000:1000"
#define DOCKER_WORKSPACE "/workspace"
#define DOCKER_LABEL "mesh.install"
#define DOCKER_BACKEND_LABEL "mesh.backend"
#define TAR_BLOCK 512

/*
 * Runs one command: $1 key, $2 timeout (seconds), $3 the bytes of each
 * stream kept (the last ones), $4 directory, then argv.  The command gets its own session (so
 * its process group is its whole tree unless it starts another session),
 * is killed with that group at the timeout and when it exits, and only the
 * tail of its output comes back (the watchdog marks the timeout before
 * it kills, so the wrapper cannot miss the mark).  The last bytes of stderr are the
 * trailer "\036mesh:<timed out>:<stdout bytes>:<stderr bytes>"; the exit
 * status is the command's.  The shell's own chatter goes to /dev/null.
 */
static const char exec_wrapper[] =
"exec 3>&2 2>/dev/null\n"
"k=$1 s=$2 t=$3 w=$4; shift 4\n"
"d=" DOCKER_SCRATCH "/$k; mkdir -p \"$d\" || exit 125\n"
"i=/dev/null; [ -f \"$d/in\" ] && i=$d/in\n"
"if cd -- \"$w\"; then\n"
"  setsid \"$@\" <\"$i\" >\"$d/out\" 2>\"$d/err\" &\n"
"  p=$!; echo \"$p\" >\"$d/pid\"\n"
"  ( sleep \"$s\" & z=$!; trap 'kill $z; exit 0' TERM; wait $z; : >\"$d/timeout\"; kill -KILL -\"$p\" ) </dev/null >/dev/null 2>&1 &\n"
"  g=$!; wait \"$p\"; r=$?\n"
"  kill \"$g\"; kill -KILL -\"$p\"\n"
"else\n"
"  r=1; : >\"$d/out\"; echo \"mesh: no such directory: $w\" >\"$d/err\"\n"
"fi\n"
"e() { tail -c \"$t\" \"$1\"; }\n"
"e \"$d/out\"; e \"$d/err\" >&3\n"
"o=0; [ -e \"$d/timeout\" ] && o=1\n"
"printf '\\036mesh:%d:%d:%d' \"$o\" \"$(wc -c <\"$d/out\")\" \"$(wc -c <\"$d/err\")\" >&3\n"
"rm -rf \"$d\"; exit \"$r\"\n";

/*
 * Where a read may go: $1 is the lexically confined relative path.  Prints
 * "ok <resolved path>" or missing / refused / directory, after resolving
 * every symlink inside the container.
 */
static const char read_check_script[] =
"p=" DOCKER_WORKSPACE "/$1\n"
"r=$(readlink -f -- \"$p\") || { [ -e \"${p%/*}\" ] && echo refused || echo missing; exit 0; }\n"
"case $r in " DOCKER_WORKSPACE "/*) ;; *) echo refused; exit 0;; esac\n"
"[ -e \"$r\" ] || { echo missing; exit 0; }\n"
"[ -d \"$r\" ] && { echo directory; exit 0; }\n"
"[ -f \"$r\" ] || { echo refused; exit 0; }\n"
"echo \"ok $r\"\n";

/*
 * Where a write may go: the deepest existing ancestor must resolve inside
 * the workspace before any directory is made; then the parents are made (as
 * the workspace user) and the resolved parent is printed as "ok <dir>".
 */
static const char write_check_script[] =
"p=" DOCKER_WORKSPACE "/$1; q=${p%/*}\n"
"inside() { case $1/ in " DOCKER_WORKSPACE "/*) return 0;; esac; return 1; }\n"
"a=$q; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=${a%/*}; done\n"
"r=$(readlink -f -- \"$a\") && inside \"$r\" && [ -d \"$r\" ] || { echo refused; exit 0; }\n"
"mkdir -p -- \"$q\" || { echo refused; exit 0; }\n"
"r=$(readlink -f -- \"$q\") && inside \"$r\" || { echo refused; exit 0; }\n"
"f=$r/${p##*/}\n"
"if [ -L \"$f\" ]; then x=$(readlink -f -- \"$f\") && inside \"$x\" || { echo refused; exit 0; }; fi\n"
"[ -d \"$f\" ] && { echo directory; exit 0; }\n"
"echo \"ok $r\"\n";

/* Phases of the multi-step operations; each names the answer it awaits. */
typedef enum DockerPhase
{
	PH_CREATE,					/* container create */
	PH_INSPECT,					/* container inspect after a name conflict */
	PH_START,					/* container start */
	PH_STDIN,					/* archive upload of the stdin file */
	PH_EXEC_CREATE,
	PH_EXEC_START,
	PH_EXEC_INSPECT,
	PH_ARCHIVE,					/* archive download or upload of a file */
	PH_LAUNCH,					/* exec create of a background command's wrapper */
	PH_LAUNCH_START				/* its detached start */
} DockerPhase;

/* The driver's state for one operation (MeshOpState.data). */
typedef struct DockerOp
{
	DockerPhase phase;
	const char *ref;
	const char *install_id;
	bool		limits_dropped;	/* the daemon warned it cannot apply a limit */
	/* exec */
	MeshHttpRequest create;		/* the exec create, sent after the stdin upload */
	MeshHttpRequest upload;		/* a background command's stdin upload, after its claim */
	bool		has_stdin;
	long		wait_ms;		/* how long an output call may wait in the container */
	long		timeout_ms;
	const char *key;
	long		kept;			/* bytes of each stream that come back */
	TimestampTz started;
	char	   *exec_id;
	StringInfoData out;
	StringInfoData err;
	/* files */
	const char *rel;			/* confined path relative to the workspace */
	int			mode;
	const char *data;
	size_t		len;
	void		(*after_check) (const MeshBackend *be, struct DockerOp *op, const char *resolved,
								MeshHttpRequest *req);
	/* release */
	bool		keep;			/* stop (hibernate) rather than remove */
} DockerOp;

/*--------------------------------------------------------------------------
 * Config and capabilities
 *--------------------------------------------------------------------------
 */

/* A numeric "uid:gid": names would need the image's passwd file to agree. */
static bool
valid_user(const char *user)
{
	const char *colon = strchr(user, ':');

	if (colon == NULL || colon == user || colon[1] == '\0')
		return false;
	for (const char *p = user; *p; p++)
		if (p != colon && !isdigit((unsigned char) *p))
			return false;
	return true;
}

/* Name the first bad field, so the admin sees what to fix. */
static const char *
docker_validate_config(json_t *config)
{
	json_t	   *socket = json_object_get(config, "socket");
	json_t	   *image = json_object_get(config, "image");
	json_t	   *user = json_object_get(config, "user");
	json_t	   *release = json_object_get(config, "release");
	json_t	   *timeout = json_object_get(config, "request_timeout_ms");
	const char *key;
	json_t	   *value;

	json_object_foreach(config, key, value)
	{
		if (strcmp(key, "socket") != 0 && strcmp(key, "image") != 0 &&
			strcmp(key, "user") != 0 && strcmp(key, "release") != 0 &&
			strcmp(key, "request_timeout_ms") != 0)
			return psprintf("%s: unknown field (expected socket, image, user, release, request_timeout_ms)", key);
	}
	if (socket == NULL || !json_is_string(socket) || json_string_value(socket)[0] != '/')
		return "socket: the Docker daemon's unix socket must be given as an absolute path";
	if (image == NULL || !json_is_string(image) || json_string_value(image)[0] == '\0' ||
		strpbrk(json_string_value(image), " \"\\") != NULL)
		return "image: must name an image the daemon has (e.g. \"mesh-sandbox:latest\")";
	if (user && (!json_is_string(user) || !valid_user(json_string_value(user))))
		return "user: must be a numeric \"uid:gid\" (e.g. \"1000:1000\")";
	if (user && strncmp(json_string_value(user), "0:", 2) == 0)
		return "user: must not be root (0)";
	if (release && (!json_is_string(release) ||
					(strcmp(json_string_value(release), "destroy") != 0 &&
					 strcmp(json_string_value(release), "hibernate") != 0)))
		return "release: must be \"destroy\" or \"hibernate\"";
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 100))
		return "request_timeout_ms: must be an integer of at least 100";
	return NULL;
}

/* Access to the socket is the credential: file permissions, nothing stored. */
static bool
docker_needs_credential(json_t *config)
{
	return false;
}

/*
 * What a container enforces: limits (unless the daemon drops them, seen at
 * create), no network at all; but no per-exec CPU metering, no outbound
 * allowlist (network is none or nothing) and no project-state snapshots:
 * the driver has no way to capture /workspace apart from the image (a volume
 * per snapshot and a copy-on-write view of it are not implemented), and
 * committing the container would capture the base image with the project.
 */
static void
docker_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->shell = true;
	caps->resource_limits = true;
	caps->hibernate = true;
	caps->caller_chosen_id = true;
	caps->background = true;
}

static const char *
config_user(const MeshBackend *be)
{
	json_t	   *user = json_object_get(be->config, "user");

	return user ? json_string_value(user) : DOCKER_DEFAULT_USER;
}

/*--------------------------------------------------------------------------
 * Requests and errors
 *--------------------------------------------------------------------------
 */

/* Start a request to the daemon: socket, API version, deadline. */
static void
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
static char *
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

static MeshFailure
failure_for_status(long status)
{
	if (status == 404)
		return MESH_FAIL_NOT_FOUND;
	if (status == 409)
		return MESH_FAIL_NOT_RUNNING;
	if (status >= 400 && status < 500)
		return MESH_FAIL_BAD_REQUEST;
	return MESH_FAIL_UNAVAILABLE;
}

/*
 * Whether the daemon answered 2xx; otherwise set err with the backend's
 * name, what was being done, and the daemon's message.  A socket that does
 * not answer is reported by the shared helper (daemon down).
 */
static bool
docker_ok(const MeshHttpResponse *resp, const MeshBackend *be, const char *doing, MeshError *err)
{
	if (resp->transport_error)
		return mesh_http_error_from_json(resp, be->name, err);
	if (resp->status >= 200 && resp->status < 300)
		return true;
	mesh_error_set(err, failure_for_status(resp->status),
				   "backend \"%s\" (Docker) could not %s: HTTP %ld: %s",
				   be->name, doing, resp->status, docker_message(resp));
	return false;
}

static json_t *
parse_object(const MeshHttpResponse *resp, const MeshBackend *be, MeshError *err)
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

static DockerOp *
op_new(MeshOpState *st, const char *ref)
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
static void
tar_header(StringInfo tar, const char *name, char type, int mode, const char *user, size_t size)
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
static void
tar_file(StringInfo tar, const char *name, int mode, const char *user, const char *data, size_t len)
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
		tar_header(tar, "././@PaxHeader", 'x', 0644, user, strlen(record));
		appendStringInfoString(tar, record);
		tar_pad(tar);
	}
	tar_header(tar, name, '0', mode, user, len);
	appendBinaryStringInfo(tar, data, len);
	tar_pad(tar);
}

/* Two zero blocks end an archive. */
static void
tar_end(StringInfo tar)
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
static bool
tar_first_file(const char *tar, size_t len, const char **data, size_t *size, bool *is_file)
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
static void
exec_create_request(const MeshBackend *be, const char *ref, json_t *cmd, json_t *env,
					bool attach, MeshHttpRequest *req)
{
	json_t	   *body = json_pack("{s:b,s:b,s:b,s:o,s:s,s:s}",
								 "AttachStdin", 0, "AttachStdout", attach, "AttachStderr", attach,
								 "Cmd", cmd, "User", config_user(be),
								 "WorkingDir", DOCKER_WORKSPACE);

	if (env)
		json_object_set_new(body, "Env", env);
	docker_begin(be, req, "POST", psprintf("/containers/%s/exec", mesh_url_encode(ref)));
	mesh_http_json_body(req, body);
}

/* ["sh", "-c", script, "mesh", args...] */
static json_t *
script_cmd(const char *script)
{
	return json_pack("[s,s,s,s]", "/bin/sh", "-c", script, "mesh");
}

/* The exec's id from a create answer, in op->exec_id. */
static bool
take_exec_id(const MeshBackend *be, DockerOp *op, const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc = parse_object(resp, be, err);
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
static void
exec_start_request(const MeshBackend *be, DockerOp *op, long extra_ms, bool detach,
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
static bool
demux(const char *buf, size_t len, StringInfo out, StringInfo err)
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
 * (script_step).
 */
static void
script_request(const MeshBackend *be, DockerOp *op, const char *script, const char *const *args,
			   MeshHttpRequest *req)
{
	json_t	   *cmd = script_cmd(script);

	for (; *args; args++)
		json_array_append_new(cmd, json_string(*args));
	if (op->out.data == NULL)
		initStringInfo(&op->out);
	if (op->err.data == NULL)
		initStringInfo(&op->err);
	op->phase = PH_EXEC_CREATE;
	exec_create_request(be, op->ref, cmd, NULL, true, req);
}

/*
 * A script's two steps: its create, then its attached start, whose answer
 * (it may take EXTRA_MS longer than a plain call) is demultiplexed into
 * op->out and op->err.  NEXT after the create, DONE once the output is in;
 * DOING names the script's purpose in errors.
 */
static MeshStepResult
script_step(const MeshBackend *be, MeshOpState *st, DockerOp *op, const MeshHttpResponse *resp,
			const char *doing, long extra_ms, MeshError *err)
{
	if (op->phase == PH_EXEC_CREATE)
	{
		if (!docker_ok(resp, be, doing, err) || !take_exec_id(be, op, resp, err))
			return MESH_STEP_FAILED;
		op->phase = PH_EXEC_START;
		exec_start_request(be, op, extra_ms, false, &st->next);
		return MESH_STEP_NEXT;
	}
	Assert(op->phase == PH_EXEC_START);
	if (!docker_ok(resp, be, doing, err))
		return MESH_STEP_FAILED;
	if (!demux(resp->body, resp->body_len, &op->out, &op->err))
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
static bool
container_absent(const DockerOp *op, const MeshHttpResponse *resp)
{
	return op->phase == PH_EXEC_CREATE && !resp->transport_error &&
		(resp->status == 404 || resp->status == 409);
}

/* A key names a directory of the driver's scratch: a plain name only. */
static bool
valid_key(const MeshBackend *be, const char *key, MeshError *err)
{
	if (docker_exec_key_valid(key))
		return true;
	mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
				   "backend \"%s\" (Docker): an exec key must be 1 to 64 letters, digits, \"_\", \"-\" or \".\" (not first)",
				   be->name);
	return false;
}

/* The first line a script printed, without its newline (in op->out). */
static const char *
script_verdict(DockerOp *op)
{
	op->out.data[strcspn(op->out.data, "\n")] = '\0';
	return op->out.data;
}

/*--------------------------------------------------------------------------
 * Acquire: create (or find our own), start
 *--------------------------------------------------------------------------
 */

/* Each tier in the driver's own units: memory, CPUs, processes. */
static void
tier_limits(MeshSize size, json_int_t *memory, json_int_t *nano_cpus, json_int_t *pids)
{
	static const int mb[] = {256, 512, 1024, 2048};
	static const int milli_cpus[] = {500, 1000, 2000, 4000};
	static const int max_pids[] = {128, 256, 512, 1024};

	*memory = (json_int_t) mb[size] * 1024 * 1024;
	*nano_cpus = (json_int_t) milli_cpus[size] * 1000000;
	*pids = max_pids[size];
}

/* The container: confined, idle under tini until execs arrive. */
static json_t *
container_spec(const MeshBackend *be, MeshSize size, const char *install_id)
{
	json_int_t	memory;
	json_int_t	nano_cpus;
	json_int_t	pids;

	tier_limits(size, &memory, &nano_cpus, &pids);
	return json_pack("{s:s,s:[s,s],s:s,s:[s,s],s:s,s:b,s:{s:s,s:s,s:s},s:{"
					 "s:s,s:b,s:[s],s:[s],s:b,s:I,s:I,s:I,s:I,"
					 "s:[{s:s,s:s},{s:s,s:s}]}}",
					 "Image", json_string_value(json_object_get(be->config, "image")),
					 "Entrypoint", "/bin/sleep", "2147483647",
					 "User", config_user(be),
					 "Env", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" DOCKER_WORKSPACE,
					 "WorkingDir", DOCKER_WORKSPACE,
					 "NetworkDisabled", 1,
					 "Labels", DOCKER_LABEL, install_id, DOCKER_BACKEND_LABEL, be->name,
					 "mesh.size", mesh_size_name(size),
					 "HostConfig",
					 "NetworkMode", "none",
					 "ReadonlyRootfs", 1,
					 "CapDrop", "ALL",
					 "SecurityOpt", "no-new-privileges",
					 "Init", 1,
					 "Memory", memory,
					 "MemorySwap", memory,
					 "NanoCpus", nano_cpus,
					 "PidsLimit", pids,
					 "Mounts",
					 "Type", "volume", "Target", DOCKER_WORKSPACE,
					 "Type", "volume", "Target", DOCKER_SCRATCH);
}

static bool
docker_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					   const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op;

	if (!mesh_acquire_without_snapshot(be, spec, err))
		return false;
	op = op_new(st, ref);
	op->install_id = pstrdup(spec->install_id);
	op->phase = PH_CREATE;
	docker_begin(be, req, "POST", psprintf("/containers/create?name=%s", mesh_url_encode(ref)));
	mesh_http_json_body(req, container_spec(be, spec->size, spec->install_id));
	return true;
}

/* A create warning about a limit means the host does not enforce it. */
static bool
warns_of_dropped_limits(json_t *doc)
{
	json_t	   *warnings = json_object_get(doc, "Warnings");
	size_t		i;
	json_t	   *w;

	json_array_foreach(warnings, i, w)
	{
		const char *text = json_string_value(w);

		if (text && (strstr(text, "limit") || strstr(text, "memory") || strstr(text, "CPU") ||
					 strstr(text, "cpu")))
			return true;
	}
	return false;
}

static void
container_start_request(const MeshBackend *be, DockerOp *op, MeshHttpRequest *req)
{
	op->phase = PH_START;
	docker_begin(be, req, "POST", psprintf("/containers/%s/start", mesh_url_encode(op->ref)));
}

/* Created, or the name is taken: inspect it to see whether it is ours. */
static MeshStepResult
acquire_created(const MeshBackend *be, MeshOpState *st, DockerOp *op,
				const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;

	if (resp->status == 409)
	{
		op->phase = PH_INSPECT;
		docker_begin(be, &st->next, "GET", psprintf("/containers/%s/json", mesh_url_encode(op->ref)));
		return MESH_STEP_NEXT;
	}
	if (resp->status == 404 && !resp->transport_error)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Docker) has no image \"%s\": %s; import or pull it on the Docker host",
					   be->name, json_string_value(json_object_get(be->config, "image")),
					   docker_message(resp));
		return MESH_STEP_FAILED;
	}
	if (!docker_ok(resp, be, "create a container", err))
		return MESH_STEP_FAILED;
	if ((doc = parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	op->limits_dropped = warns_of_dropped_limits(doc);
	json_decref(doc);
	container_start_request(be, op, &st->next);
	return MESH_STEP_NEXT;
}

/* A container by our name exists: only one labelled with our install and entry is ours. */
static MeshStepResult
acquire_inspected(const MeshBackend *be, MeshOpState *st, DockerOp *op,
				  const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;
	const char *owner = NULL;
	const char *entry = NULL;

	if (!docker_ok(resp, be, "inspect an existing container", err))
		return MESH_STEP_FAILED;
	if ((doc = parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	json_unpack(doc, "{s:{s:{s?s,s?s}}}", "Config", "Labels", DOCKER_LABEL, &owner,
				DOCKER_BACKEND_LABEL, &entry);
	if (owner == NULL || strcmp(owner, op->install_id) != 0 ||
		entry == NULL || strcmp(entry, be->name) != 0)
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\" (Docker): a container named \"%s\" exists and does not belong to this installation and backend (name conflict)",
					   be->name, op->ref);
		return MESH_STEP_FAILED;
	}
	json_decref(doc);
	container_start_request(be, op, &st->next);
	return MESH_STEP_NEXT;
}

/* create -> [inspect] -> start; 304 from start means it already runs. */
static MeshStepResult
docker_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshCapabilities *caps, MeshError *err)
{
	DockerOp   *op = st->data;

	switch (op->phase)
	{
		case PH_CREATE:
			return acquire_created(be, st, op, resp, err);
		case PH_INSPECT:
			return acquire_inspected(be, st, op, resp, err);
		default:
			break;
	}
	if (resp->status != 304 && !docker_ok(resp, be, "start the container", err))
		return MESH_STEP_FAILED;
	docker_declared_capabilities(be, caps);
	if (op->limits_dropped)
		caps->resource_limits = false;
	return MESH_STEP_DONE;
}

/*--------------------------------------------------------------------------
 * Exec
 *--------------------------------------------------------------------------
 */

/* env object -> ["K=V", ...] */
static json_t *
env_array(json_t *env)
{
	json_t	   *list = json_array();
	const char *key;
	json_t	   *value;

	json_object_foreach(env, key, value)
		if (json_is_string(value))
		json_array_append_new(list, json_string(psprintf("%s=%s", key, json_string_value(value))));
	return list;
}

/*
 * The exec create request of the wrapped command, built while the spec is
 * at hand: an ordinary exec's wrapper (attached), or a background
 * command's (detached, no timeout when none is given).
 */
static void
exec_command_request(const MeshBackend *be, DockerOp *op, const MeshExecSpec *spec,
					 MeshHttpRequest *req)
{
	json_t	   *cmd = script_cmd(spec->background ? docker_bg_wrapper : exec_wrapper);

	json_array_append_new(cmd, json_string(op->key));
	if (spec->background && spec->timeout_ms <= 0)
		json_array_append_new(cmd, json_string("0"));
	else
		json_array_append_new(cmd, json_string(psprintf("%ld.%03ld", spec->timeout_ms / 1000,
														spec->timeout_ms % 1000)));
	if (!spec->background)
		json_array_append_new(cmd, json_string(psprintf("%ld", op->kept)));
	json_array_append_new(cmd, json_string(spec->dir && spec->dir[0] ? spec->dir : "."));
	for (int i = 0; i < spec->argc; i++)
		json_array_append_new(cmd, json_string(spec->argv[i]));
	exec_create_request(be, op->ref, cmd, spec->env ? env_array(spec->env) : NULL,
						!spec->background, req);
}

/*
 * PUT the stdin file into the exec's own scratch directory (an ordinary
 * exec's under /run/mesh, a background command's record), owned by the user.
 */
static void
stdin_upload_request(const MeshBackend *be, DockerOp *op, const MeshExecSpec *spec,
					 MeshHttpRequest *req)
{
	StringInfoData tar;

	initStringInfo(&tar);
	tar_header(&tar, psprintf("%s/", op->key), '5', 0700, config_user(be), 0);
	tar_file(&tar, psprintf("%s/in", op->key), 0600, config_user(be),
			 spec->stdin_data, spec->stdin_len);
	tar_end(&tar);
	docker_begin(be, req, "PUT", psprintf("/containers/%s/archive?path=%s",
										  mesh_url_encode(op->ref),
										  spec->background ? DOCKER_BG_DIR : DOCKER_SCRATCH));
	req->body = tar.data;
	req->body_len = tar.len;
	mesh_http_add_header(req, "Content-Type: application/x-tar");
}

/*
 * Stdin first (as a file in the exec's scratch directory), else the
 * command.  A background command claims its key first (background_claimed).
 */
static bool
docker_exec_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = op_new(st, ref);

	op->key = pstrdup(spec->exec_key);
	op->timeout_ms = spec->timeout_ms;
	op->kept = spec->max_output_bytes;
	op->started = GetCurrentTimestamp();
	initStringInfo(&op->out);
	initStringInfo(&op->err);
	if (spec->background)
	{
		if (!valid_key(be, op->key, err))
			return false;
		exec_command_request(be, op, spec, &op->create);
		op->has_stdin = spec->stdin_data != NULL;
		if (op->has_stdin)
			stdin_upload_request(be, op, spec, &op->upload);
		script_request(be, op, docker_bg_claim_script, (const char *[]) {op->key, NULL}, req);
		return true;
	}
	if (spec->stdin_data == NULL)
	{
		op->phase = PH_EXEC_CREATE;
		exec_command_request(be, op, spec, req);
		return true;
	}
	op->phase = PH_STDIN;
	exec_command_request(be, op, spec, &op->create);
	stdin_upload_request(be, op, spec, req);
	return true;
}

/* The trailer at the end of stderr: timed out, full stdout/stderr sizes. */
static bool
take_trailer(StringInfo err, bool *timed_out, long long *out_size, long long *err_size)
{
	const char *mark = NULL;
	int			to;

	for (int i = err->len - 1; i >= 0; i--)
		if (err->data[i] == '\036')
		{
			mark = err->data + i;
			break;
		}
	if (mark == NULL || sscanf(mark, "\036mesh:%d:%lld:%lld", &to, out_size, err_size) != 3)
		return false;
	err->len = (int) (mark - err->data);
	err->data[err->len] = '\0';
	*timed_out = to != 0;
	return true;
}

/* The kept tail of a stream, and what the command wrote in all. */
static void
take_stream(StringInfo s, long long full, char **data, size_t *len, int64_t *total,
			bool *truncated)
{
	*data = s->data;
	*len = s->len;
	*total = Max(full, (long long) s->len);
	if (*total > (int64_t) s->len)
		*truncated = true;
}

/* The stream ended: keep both outputs, then ask for the exit code. */
static MeshStepResult
exec_streamed(const MeshBackend *be, MeshOpState *st, DockerOp *op, const MeshHttpResponse *resp,
			  MeshError *err)
{
	if (!docker_ok(resp, be, "run the command", err))
		return MESH_STEP_FAILED;
	if (!demux(resp->body, resp->body_len, &op->out, &op->err))
	{
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) answered an exec with a malformed output stream", be->name);
		return MESH_STEP_FAILED;
	}
	op->phase = PH_EXEC_INSPECT;
	docker_begin(be, &st->next, "GET", psprintf("/exec/%s/json", op->exec_id));
	return MESH_STEP_NEXT;
}

/* Exit code from the inspect; the rest from the wrapper's trailer. */
static MeshStepResult
exec_finished(const MeshBackend *be, DockerOp *op, const MeshHttpResponse *resp,
			  MeshExecResult *result, MeshError *err)
{
	json_t	   *doc;
	json_t	   *code;
	long long	out_size = 0;
	long long	err_size = 0;
	bool		complete;

	if (!docker_ok(resp, be, "inspect the finished command", err) ||
		(doc = parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	code = json_object_get(doc, "ExitCode");
	if (!json_is_integer(code) || json_is_true(json_object_get(doc, "Running")))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) reported no exit code for a finished command", be->name);
		return MESH_STEP_FAILED;
	}
	memset(result, 0, sizeof(*result));
	result->exit_code = (int) json_integer_value(code);
	json_decref(doc);
	complete = take_trailer(&op->err, &result->timed_out, &out_size, &err_size);
	/* no trailer: the wrapper itself was killed (a cancel, or the container stopped) */
	result->killed = !complete;
	take_stream(&op->out, complete ? out_size : op->out.len,
				&result->stdout_data, &result->stdout_len, &result->stdout_total, &result->truncated);
	take_stream(&op->err, complete ? err_size : op->err.len,
				&result->stderr_data, &result->stderr_len, &result->stderr_total, &result->truncated);
	result->wall_seconds = (double) (GetCurrentTimestamp() - op->started) / 1000000.0;
	result->cpu_metered = false;
	return MESH_STEP_DONE;
}

/* stdin upload -> exec create -> start (stream) -> inspect (exit code). */
static MeshStepResult
docker_exec_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshExecResult *result, MeshError *err)
{
	DockerOp   *op = st->data;

	switch (op->phase)
	{
		case PH_STDIN:
			if (!docker_ok(resp, be, "deliver stdin", err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_CREATE;
			st->next = op->create;
			return MESH_STEP_NEXT;
		case PH_EXEC_CREATE:
			if (!docker_ok(resp, be, "create an exec", err) || !take_exec_id(be, op, resp, err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_START;
			/* the transport must outlast the command's own timeout */
			exec_start_request(be, op, op->timeout_ms + 10000, false, &st->next);
			return MESH_STEP_NEXT;
		case PH_EXEC_START:
			return exec_streamed(be, st, op, resp, err);
		default:
			return exec_finished(be, op, resp, result, err);
	}
}

/*--------------------------------------------------------------------------
 * Kill: an exec that kills the recorded process group
 *--------------------------------------------------------------------------
 */

/* SIGNAL (NULL: KILL) to the exec's process group, background or not. */
static bool
docker_kill_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					const char *exec_key, const char *signal, MeshHttpRequest *req,
					MeshError *err)
{
	DockerOp   *op = op_new(st, ref);

	if (signal == NULL)
		signal = "KILL";
	if (!valid_key(be, exec_key, err))
		return false;
	if (!docker_signal_valid(signal))
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": cannot send signal \"%s\" (TERM, INT, HUP, QUIT, USR1, USR2 or KILL)",
					   be->name, signal);
		return false;
	}
	script_request(be, op, docker_kill_script, (const char *[]) {exec_key, signal, NULL}, req);
	req->timeout_ms = Min(req->timeout_ms, 10000);
	return true;
}

/* A container that is gone or stopped has nothing left to kill. */
static MeshStepResult
docker_kill_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;

	if (container_absent(op, resp))
		return MESH_STEP_DONE;
	step = script_step(be, st, op, resp, "kill the command", 0, err);
	if (step == MESH_STEP_NEXT)
		st->next.timeout_ms = Min(st->next.timeout_ms, 10000);
	return step;
}

/*--------------------------------------------------------------------------
 * Background commands: claim, [stdin], detached wrapper; output; forget
 *--------------------------------------------------------------------------
 */

/* The claim's verdict: on to stdin or the wrapper, or the key is taken. */
static MeshStepResult
background_claimed(const MeshBackend *be, MeshOpState *st, DockerOp *op, MeshError *err)
{
	const char *verdict = script_verdict(op);

	if (strcmp(verdict, "claimed") == 0)
	{
		op->phase = op->has_stdin ? PH_STDIN : PH_LAUNCH;
		st->next = op->has_stdin ? op->upload : op->create;
		return MESH_STEP_NEXT;
	}
	if (strcmp(verdict, "used") == 0)
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": exec key \"%s\" is already used in this workspace",
					   be->name, op->key);
	else
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) could not record a background command in " DOCKER_BG_DIR ": \"%s\"%s%s",
					   be->name, verdict, op->err.len ? ": " : "", op->err.data);
	return MESH_STEP_FAILED;
}

/* Docker's word that the wrapper's process started (running, or already ended). */
static MeshStepResult
background_started(const MeshBackend *be, const MeshHttpResponse *resp, MeshError *err)
{
	json_t	   *doc;
	bool		started;

	if (!docker_ok(resp, be, "inspect the background command", err) ||
		(doc = parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	started = json_is_true(json_object_get(doc, "Running")) ||
		json_is_integer(json_object_get(doc, "ExitCode"));
	json_decref(doc);
	if (started)
		return MESH_STEP_DONE;
	mesh_error_set(err, MESH_FAIL_PROTOCOL,
				   "backend \"%s\" (Docker) accepted a background command but reports it neither running nor ended",
				   be->name);
	return MESH_STEP_FAILED;
}

/*
 * claim (create, start: "claimed" or "used") -> [stdin upload] -> wrapper
 * create -> detached start -> exec inspect.  The claim makes the record
 * before anything can be written into it, so a key in use is refused
 * before its stdin could be touched.
 */
static MeshStepResult
docker_exec_start_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						   MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;

	switch (op->phase)
	{
		case PH_EXEC_CREATE:
		case PH_EXEC_START:
			step = script_step(be, st, op, resp, "record a background command", 0, err);
			return step == MESH_STEP_DONE ? background_claimed(be, st, op, err) : step;
		case PH_STDIN:
			if (!docker_ok(resp, be, "deliver stdin", err))
				return MESH_STEP_FAILED;
			op->phase = PH_LAUNCH;
			st->next = op->create;
			return MESH_STEP_NEXT;
		case PH_LAUNCH:
			if (!docker_ok(resp, be, "create the background command's exec", err) ||
				!take_exec_id(be, op, resp, err))
				return MESH_STEP_FAILED;
			op->phase = PH_LAUNCH_START;
			exec_start_request(be, op, 0, true, &st->next);
			return MESH_STEP_NEXT;
		case PH_LAUNCH_START:
			if (!docker_ok(resp, be, "start the background command", err))
				return MESH_STEP_FAILED;
			op->phase = PH_EXEC_INSPECT;
			docker_begin(be, &st->next, "GET", psprintf("/exec/%s/json", op->exec_id));
			return MESH_STEP_NEXT;
		default:
			return background_started(be, resp, err);
	}
}

/*
 * One exec of the output script (docker_background.c), attached: it waits
 * in the container up to wait_ms, so its start may take that much longer.
 * The spool keeps the bytes before ask->*_kept (docs/backends.md): it lives
 * in the container's scratch volume, on the engine's storage like the
 * workspace's own files.
 */
static bool
docker_exec_output_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						   const char *exec_key, const MeshOutputAsk *ask,
						   MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = op_new(st, ref);
	long		looks;

	if (!valid_key(be, exec_key, err))
		return false;
	if (ask->stdout_from < 0 || ask->stderr_from < 0)
	{
		mesh_error_set(err, MESH_FAIL_BAD_REQUEST,
					   "backend \"%s\": output offsets must not be negative", be->name);
		return false;
	}
	op->key = pstrdup(exec_key);
	op->wait_ms = Max(ask->wait_ms, 0);
	looks = (op->wait_ms + DOCKER_BG_POLL_MS - 1) / DOCKER_BG_POLL_MS;
	script_request(be, op, docker_bg_output_script,
				   (const char *[]) {exec_key,
					   psprintf(INT64_FORMAT, ask->stdout_from),
					   psprintf(INT64_FORMAT, ask->stderr_from),
					   psprintf("%ld", looks),
					   psprintf("%zu", Min(ask->max_bytes, (size_t) PG_INT64_MAX)),
				   NULL}, req);
	return true;
}

/* What the reader found, as the contract's progress (or why there is none). */
static MeshStepResult
background_progress(const MeshBackend *be, DockerOp *op, MeshExecProgress *progress,
					MeshError *err)
{
	DockerBgOutput found;

	if (!docker_bg_output_parse(op->out.data, op->out.len, &found))
	{
		/* nothing at all: the script was killed with its container (stopped meanwhile) */
		mesh_error_set(err, op->out.len == 0 ? MESH_FAIL_NOT_RUNNING : MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker) answered an output call for exec \"%s\" with %s%s%s",
					   be->name, op->key,
					   op->out.len == 0 ? "nothing (its container stopped?)" : "an unreadable record",
					   op->err.len ? ": " : "", op->err.data);
		return MESH_STEP_FAILED;
	}
	if (found.state == DOCKER_BG_MISSING || found.state == DOCKER_BG_LOST)
	{
		mesh_error_set(err, MESH_FAIL_NOT_FOUND,
					   found.state == DOCKER_BG_MISSING ?
					   "backend \"%s\": no background command \"%s\" in this workspace" :
					   "backend \"%s\": background command \"%s\" is gone without an end (its container was stopped or restarted)",
					   be->name, op->key);
		return MESH_STEP_FAILED;
	}
	memset(progress, 0, sizeof(*progress));
	progress->stdout_data = found.out_data;
	progress->stdout_len = found.out_len;
	progress->stdout_from = found.out_from;
	progress->stderr_data = found.err_data;
	progress->stderr_len = found.err_len;
	progress->stderr_from = found.err_from;
	progress->ended = docker_bg_output_reaches_end(&found);
	if (progress->ended)
	{
		progress->result.exit_code = found.exit_code;
		progress->result.timed_out = found.timed_out;
		progress->result.killed = found.killed;
		progress->result.stdout_total = found.out_total;
		progress->result.stderr_total = found.err_total;
		progress->result.wall_seconds = found.wall_seconds;
	}
	return MESH_STEP_DONE;
}

/* A container that is gone has no record; a stopped one cannot be read now. */
static MeshStepResult
docker_exec_output_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
							MeshExecProgress *progress, MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step = script_step(be, st, op, resp, "read a background command's output",
									  op->wait_ms, err);

	return step == MESH_STEP_DONE ? background_progress(be, op, progress, err) : step;
}

/* One exec of the forget script: the record goes unless its command still runs. */
static bool
docker_exec_forget_request(const MeshBackend *be, MeshOpState *st, const char *ref,
						   const char *exec_key, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = op_new(st, ref);

	if (!valid_key(be, exec_key, err))
		return false;
	op->key = pstrdup(exec_key);
	script_request(be, op, docker_bg_forget_script, (const char *[]) {exec_key, NULL}, req);
	return true;
}

/*
 * "gone": removed, or never there.  A container that is gone took the
 * record with it; a stopped one keeps it in its scratch volume until it is
 * removed (its wrapper is dead, so a later forget removes it).
 */
static MeshStepResult
docker_exec_forget_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
							MeshError *err)
{
	DockerOp   *op = st->data;
	MeshStepResult step;
	const char *verdict;

	if (container_absent(op, resp))
		return MESH_STEP_DONE;
	step = script_step(be, st, op, resp, "forget a background command", 0, err);
	if (step != MESH_STEP_DONE)
		return step;
	verdict = script_verdict(op);
	if (strcmp(verdict, "gone") == 0)
		return MESH_STEP_DONE;
	mesh_error_set(err, strcmp(verdict, "running") == 0 ? MESH_FAIL_BAD_REQUEST : MESH_FAIL_PROTOCOL,
				   strcmp(verdict, "running") == 0 ?
				   "backend \"%s\": background command \"%s\" is still running; kill it first" :
				   "backend \"%s\" (Docker) could not remove the record of background command \"%s\"%s%s",
				   be->name, op->key, op->err.len ? ": " : "", op->err.data);
	return MESH_STEP_FAILED;
}

/*--------------------------------------------------------------------------
 * Files: a check exec inside the container, then the archive API
 *--------------------------------------------------------------------------
 */

/*
 * Confine a caller's path lexically: relative to the workspace, or absolute
 * under it; ".." may not climb out.  Returns the normalized relative path
 * ("" for the workspace itself), or NULL when refused.
 */
static char *
confine_path(const char *path)
{
	StringInfoData out;
	char	   *copy;
	char	   *part;
	char	   *save = NULL;
	List	   *parts = NIL;
	ListCell   *lc;

	if (path[0] == '/')
	{
		size_t		n = strlen(DOCKER_WORKSPACE);

		if (strncmp(path, DOCKER_WORKSPACE, n) != 0 || (path[n] != '/' && path[n] != '\0'))
			return NULL;
		path += n;
	}
	copy = pstrdup(path);
	for (part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save))
	{
		if (strcmp(part, ".") == 0)
			continue;
		if (strcmp(part, "..") == 0)
		{
			if (parts == NIL)
				return NULL;
			parts = list_delete_last(parts);
			continue;
		}
		parts = lappend(parts, part);
	}
	initStringInfo(&out);
	foreach(lc, parts)
		appendStringInfo(&out, "%s%s", out.len ? "/" : "", (char *) lfirst(lc));
	return out.data;
}

/* Start a file operation with the check exec for its confined path. */
static void
file_check_request(const MeshBackend *be, DockerOp *op, const char *script, MeshHttpRequest *req)
{
	script_request(be, op, script, (const char *[]) {op->rel, NULL}, req);
}

/* The archive request for a file whose check printed "ok <resolved>". */
static void
read_archive_request(const MeshBackend *be, DockerOp *op, const char *resolved,
					 MeshHttpRequest *req)
{
	docker_begin(be, req, "GET", psprintf("/containers/%s/archive?path=%s",
										  mesh_url_encode(op->ref), mesh_url_encode(resolved)));
}

static void
write_archive_request(const MeshBackend *be, DockerOp *op, const char *parent,
					  MeshHttpRequest *req)
{
	StringInfoData tar;
	const char *slash = strrchr(op->rel, '/');

	initStringInfo(&tar);
	tar_file(&tar, slash ? slash + 1 : op->rel, op->mode, config_user(be), op->data, op->len);
	tar_end(&tar);
	docker_begin(be, req, "PUT", psprintf("/containers/%s/archive?path=%s",
										  mesh_url_encode(op->ref), mesh_url_encode(parent)));
	req->body = tar.data;
	req->body_len = tar.len;
	mesh_http_add_header(req, "Content-Type: application/x-tar");
}

/* What the check printed, turned into the next request or a refusal. */
static MeshStepResult
file_checked(const MeshBackend *be, MeshOpState *st, DockerOp *op, MeshError *err)
{
	const char *verdict = script_verdict(op);

	if (strncmp(verdict, "ok /", 4) == 0)
	{
		op->phase = PH_ARCHIVE;
		op->after_check(be, op, verdict + 3, &st->next);
		return MESH_STEP_NEXT;
	}
	if (strcmp(verdict, "missing") == 0)
		mesh_error_set(err, MESH_FAIL_NOT_FOUND, "backend \"%s\": no such file", be->name);
	else if (strcmp(verdict, "directory") == 0)
		mesh_error_set(err, MESH_FAIL_PATH_REFUSED, "backend \"%s\": it is a directory", be->name);
	else if (strcmp(verdict, "refused") == 0)
		mesh_error_set(err, MESH_FAIL_PATH_REFUSED,
					   "backend \"%s\": the path leads outside the workspace or through a non-directory",
					   be->name);
	else
		mesh_error_set(err, MESH_FAIL_PROTOCOL,
					   "backend \"%s\" (Docker): the path check answered \"%s\"%s%s", be->name,
					   verdict, op->err.len ? ": " : "", op->err.data);
	return MESH_STEP_FAILED;
}

/* check exec create -> start (verdict) -> archive; shared by read and write. */
static MeshStepResult
file_step(const MeshBackend *be, MeshOpState *st, DockerOp *op, const MeshHttpResponse *resp,
		  MeshError *err)
{
	MeshStepResult step = script_step(be, st, op, resp, "check the path", 0, err);

	return step == MESH_STEP_DONE ? file_checked(be, st, op, err) : step;
}

/* Refuse in the driver, before the daemon is asked: the exec is not needed. */
static DockerOp *
file_op(MeshOpState *st, const char *ref, const char *path)
{
	DockerOp   *op = op_new(st, ref);

	op->rel = confine_path(path);
	initStringInfo(&op->out);
	initStringInfo(&op->err);
	return op;
}

/* A path the driver refuses before the daemon is asked: no request is built. */
static bool
refuse_path(const MeshBackend *be, DockerOp *op, MeshError *err)
{
	if (op->rel != NULL && op->rel[0] != '\0')
		return false;
	mesh_error_set(err, MESH_FAIL_PATH_REFUSED,
				   "backend \"%s\": the path is not inside " DOCKER_WORKSPACE, be->name);
	return true;
}

static bool
docker_read_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = file_op(st, ref, path);

	op->after_check = read_archive_request;
	if (refuse_path(be, op, err))
		return false;
	file_check_request(be, op, read_check_script, req);
	return true;
}

/* The archive answer is a tar holding the one file. */
static MeshStepResult
docker_read_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 const char **data, size_t *len, MeshError *err)
{
	DockerOp   *op = st->data;
	bool		is_file;
	const char *file;
	size_t		size;

	if (op->phase != PH_ARCHIVE)
		return file_step(be, st, op, resp, err);
	if (!docker_ok(resp, be, "read the file", err))
		return MESH_STEP_FAILED;
	if (!tar_first_file(resp->body, resp->body_len, &file, &size, &is_file))
	{
		mesh_error_set(err, is_file ? MESH_FAIL_PROTOCOL : MESH_FAIL_PATH_REFUSED,
					   "backend \"%s\" (Docker): the archive holds no regular file", be->name);
		return MESH_STEP_FAILED;
	}
	*data = file;
	*len = size;
	return MESH_STEP_DONE;
}

static bool
docker_write_request(const MeshBackend *be, MeshOpState *st, const char *ref, const char *path,
					 int mode, const char *data, size_t len, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = file_op(st, ref, path);

	op->mode = mode;
	op->data = data;
	op->len = len;
	op->after_check = write_archive_request;
	if (refuse_path(be, op, err))
		return false;
	file_check_request(be, op, write_check_script, req);
	return true;
}

static MeshStepResult
docker_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshError *err)
{
	DockerOp   *op = st->data;

	if (op->phase != PH_ARCHIVE)
		return file_step(be, st, op, resp, err);
	return mesh_step(docker_ok(resp, be, "write the file", err));
}

/*--------------------------------------------------------------------------
 * Release and list
 *--------------------------------------------------------------------------
 */

static bool
keeps_on_release(const MeshBackend *be, bool prefer_hibernate)
{
	json_t	   *release = json_object_get(be->config, "release");

	return prefer_hibernate ||
		(release && strcmp(json_string_value(release), "hibernate") == 0);
}

/* Hibernate: stop, keeping the container and its volumes.  Else remove both. */
static bool
docker_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					   bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	DockerOp   *op = op_new(st, ref);

	op->keep = keeps_on_release(be, prefer_hibernate);
	if (op->keep)
		docker_begin(be, req, "POST", psprintf("/containers/%s/stop?t=2", mesh_url_encode(ref)));
	else
		docker_begin(be, req, "DELETE", psprintf("/containers/%s?force=1&v=1", mesh_url_encode(ref)));
	req->timeout_ms += 5000;
	return true;
}

/* 304 from stop: already stopped, which is hibernated too. */
static MeshStepResult
docker_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						MeshReleaseOutcome *outcome, MeshError *err)
{
	DockerOp   *op = st->data;

	if (!(op->keep && resp->status == 304) &&
		!docker_ok(resp, be, op->keep ? "stop the container" : "remove the container", err))
		return MESH_STEP_FAILED;
	*outcome = op->keep ? MESH_RELEASE_HIBERNATED : MESH_RELEASE_DESTROYED;
	return MESH_STEP_DONE;
}

/*
 * Every container of this install and this catalog entry, running or
 * stopped, found by labels: two entries may share one daemon, and each
 * must list only what it made, or the reaper would take the other's
 * containers for orphans.
 */
static bool
docker_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
					MeshHttpRequest *req, MeshError *err)
{
	json_t	   *filters = json_pack("{s:[s,s]}", "label",
										psprintf(DOCKER_LABEL "=%s", install_id),
										psprintf(DOCKER_BACKEND_LABEL "=%s", be->name));
	char	   *text = json_dumps(filters, JSON_COMPACT);

	docker_begin(be, req, "GET", psprintf("/containers/json?all=1&filters=%s", mesh_url_encode(text)));
	free(text);
	json_decref(filters);
	return true;
}

static MeshStepResult
docker_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					 MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	size_t		i;
	json_t	   *entry;

	if (!docker_ok(resp, be, "list containers", err) || (doc = parse_object(resp, be, err)) == NULL)
		return MESH_STEP_FAILED;
	if (!json_is_array(doc))
	{
		json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL, "backend \"%s\" (Docker) answered a list that is not an array",
					   be->name);
		return MESH_STEP_FAILED;
	}
	*items = palloc0(sizeof(MeshListedWorkspace) * (json_array_size(doc) + 1));
	*nitems = 0;
	json_array_foreach(doc, i, entry)
	{
		const char *name = json_string_value(json_array_get(json_object_get(entry, "Names"), 0));
		const char *state = json_string_value(json_object_get(entry, "State"));

		if (name == NULL)
			continue;
		(*items)[*nitems].ref = pstrdup(name[0] == '/' ? name + 1 : name);
		(*items)[*nitems].running = state && strcmp(state, "running") == 0;
		(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}

const MeshDriver mesh_docker_driver = {
	.name = "docker",
	.validate_config = docker_validate_config,
	.needs_credential = docker_needs_credential,
	.declared_capabilities = docker_declared_capabilities,
	.workspace_ref = mesh_workspace_ref,
	.acquire_request = docker_acquire_request,
	.acquire_response = docker_acquire_response,
	.exec_request = docker_exec_request,
	.exec_response = docker_exec_response,
	.kill_request = docker_kill_request,
	.kill_response = docker_kill_response,
	.exec_start_response = docker_exec_start_response,
	.exec_output_request = docker_exec_output_request,
	.exec_output_response = docker_exec_output_response,
	.exec_forget_request = docker_exec_forget_request,
	.exec_forget_response = docker_exec_forget_response,
	.read_request = docker_read_request,
	.read_response = docker_read_response,
	.write_request = docker_write_request,
	.write_response = docker_write_response,
	.release_request = docker_release_request,
	.release_response = docker_release_response,
	.list_request = docker_list_request,
	.list_response = docker_list_response,
};
