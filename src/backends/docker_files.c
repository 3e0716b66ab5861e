/*-------------------------------------------------------------------------
 *
 * docker_files.c
 *	  The docker driver's file read and write: a check exec inside the
 *	  container, then the archive API.
 *
 * A path is confined twice: lexically here (confine_path), then by a
 * script that resolves every symlink inside the container
 * (read_check_script, write_check_script) and prints where the archive
 * request may go.  Only then is the file read or written, as a tar of one
 * entry owned by the workspace user.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

#include "backends/backend.h"
#include "backends/docker_api.h"

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
	docker_script_request(be, op, script, (const char *[]) {op->rel, NULL}, req);
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
	docker_tar_file(&tar, slash ? slash + 1 : op->rel, op->mode, docker_config_user(be), op->data, op->len);
	docker_tar_end(&tar);
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
	const char *verdict = docker_script_verdict(op);

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
	MeshStepResult step = docker_script_step(be, st, op, resp, "check the path", 0, err);

	return step == MESH_STEP_DONE ? file_checked(be, st, op, err) : step;
}

/* Refuse in the driver, before the daemon is asked: the exec is not needed. */
static DockerOp *
file_op(MeshOpState *st, const char *ref, const char *path)
{
	DockerOp   *op = docker_op_new(st, ref);

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

bool
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
MeshStepResult
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
	if (!docker_tar_first_file(resp->body, resp->body_len, &file, &size, &is_file))
	{
		mesh_error_set(err, is_file ? MESH_FAIL_PROTOCOL : MESH_FAIL_PATH_REFUSED,
					   "backend \"%s\" (Docker): the archive holds no regular file", be->name);
		return MESH_STEP_FAILED;
	}
	*data = file;
	*len = size;
	return MESH_STEP_DONE;
}

bool
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

MeshStepResult
docker_write_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshError *err)
{
	DockerOp   *op = st->data;

	if (op->phase != PH_ARCHIVE)
		return file_step(be, st, op, resp, err);
	return mesh_step(docker_ok(resp, be, "write the file", err));
}
