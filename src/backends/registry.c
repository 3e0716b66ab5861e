/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The table of backend drivers, and helpers every driver shares.
 *
 * This is the only place that maps a driver name to code.  The catalog
 * (mesh.backends) stores the name; everything above this file receives a
 * MeshDriver pointer and asks it questions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "mesh_json.h"

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "backends/backend.h"

extern const MeshDriver mesh_sandboxd_driver;
extern const MeshDriver mesh_docker_driver;
extern const MeshDriver mesh_kubernetes_driver;
extern const MeshDriver mesh_isolate_driver;
extern const MeshDriver mesh_edge_driver;

static const MeshDriver *const drivers[] = {
	&mesh_sandboxd_driver,
	&mesh_docker_driver,
	&mesh_kubernetes_driver,
	&mesh_isolate_driver,
	&mesh_edge_driver,
};

static char *base64_encode_into(const char *data, size_t len, char *out);

static const char *const size_names[] = {"small", "standard", "large", "xlarge"};

/* Find a driver by the name the catalog stores; NULL when unknown. */
const MeshDriver *
mesh_driver_lookup(const char *name)
{
	for (size_t i = 0; i < lengthof(drivers); i++)
		if (strcmp(drivers[i]->name, name) == 0)
			return drivers[i];
	return NULL;
}

const char *
mesh_size_name(MeshSize size)
{
	return size_names[size];
}

bool
mesh_size_parse(const char *name, MeshSize *size)
{
	for (int i = 0; i < (int) lengthof(size_names); i++)
		if (strcmp(size_names[i], name) == 0)
		{
			*size = (MeshSize) i;
			return true;
		}
	return false;
}

/*
 * Capabilities as the JSON text a workspace row records, palloc'd: the
 * jansson document is freed here, so recording them costs nothing that
 * outlives the call.
 */
char *
mesh_capabilities_text(const MeshCapabilities *caps)
{
	json_t	   *doc = json_pack("{s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b}",
								"shell", caps->shell,
								"resource_limits", caps->resource_limits,
								"compute_metering", caps->compute_metering,
								"egress_control", caps->egress_control,
								"disk_limits", caps->disk_limits,
								"disk_quota", caps->disk_quota,
								"snapshot", caps->snapshot,
								"hibernate", caps->hibernate,
								"caller_chosen_id", caps->caller_chosen_id,
								"seccomp", caps->seccomp,
								"background", caps->background,
								"eval", caps->eval,
								"extend_timeout", caps->extend_timeout);
	char	   *text = json_dumps(doc, JSON_COMPACT);
	char	   *copy = pstrdup(text);

	free(text);
	json_decref(doc);
	return copy;
}

/*
 * The capabilities a workspace row records (mesh_capabilities_text's JSON),
 * decoded once when the row is read, so that a check is a field's test and
 * not a parse.  A capability that is absent, not true, or unknown to this
 * build counts as absent (invariant 6); so do all of them for NULL or
 * unreadable text.
 */
void
mesh_capabilities_parse(const char *text, MeshCapabilities *caps)
{
	json_t	   *doc = text ? json_loads(text, 0, NULL) : NULL;

	memset(caps, 0, sizeof(*caps));
	if (doc == NULL)
		return;
#define MESH_CAP(field) caps->field = json_is_true(json_object_get(doc, #field))
	MESH_CAP(shell);
	MESH_CAP(resource_limits);
	MESH_CAP(compute_metering);
	MESH_CAP(egress_control);
	MESH_CAP(disk_limits);
	MESH_CAP(disk_quota);
	MESH_CAP(snapshot);
	MESH_CAP(hibernate);
	MESH_CAP(caller_chosen_id);
	MESH_CAP(seccomp);
	MESH_CAP(background);
	MESH_CAP(eval);
	MESH_CAP(extend_timeout);
#undef MESH_CAP
	json_decref(doc);
}

/*
 * The reference every driver gives a new workspace: "mesh-<install>-<id>"
 * (the install id is digits), valid as a daemon workspace id, a container
 * name ([a-zA-Z0-9_.-]) and a pod name (a DNS subdomain) alike.
 */
char *
mesh_workspace_ref(const MeshBackend *be, const char *install_id, int64_t workspace_id)
{
	return psprintf("mesh-%s-%lld", install_id, (long long) workspace_id);
}

/* Append one "Name: value" header; the worker hands them to curl as they are. */
void
mesh_http_add_header(MeshHttpRequest *req, const char *fmt,...)
{
	va_list		ap;
	char		buf[1024];

	Assert(req->nheaders < MESH_HTTP_MAX_HEADERS);
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	req->headers[req->nheaders++] = pstrdup(buf);
}

/* Attach a JSON body (consumed), copied into the request's memory context. */
void
mesh_http_json_body(MeshHttpRequest *req, json_t *body)
{
	char	   *text = json_dumps(body, JSON_COMPACT);

	req->body = pstrdup(text);
	req->body_len = strlen(text);
	free(text);
	json_decref(body);
	mesh_http_add_header(req, "Content-Type: application/json");
}

/*
 * A JSON body (consumed) with one more field, the base64 of data, encoded
 * straight into the request's buffer.  A large payload (an exec's stdin) is
 * so held once, instead of as a base64 copy, a JSON string, a serialised
 * document and the request's own copy of it.
 */
void
mesh_http_json_body_b64(MeshHttpRequest *req, json_t *body, const char *field,
						const char *data, size_t len)
{
	char	   *text = json_dumps(body, JSON_COMPACT);
	size_t		head = strlen(text) - 1;	/* up to the closing brace */
	char	   *buf = palloc(head + strlen(field) + 7 + ((len + 2) / 3) * 4 + 1);
	char	   *p = buf;

	memcpy(p, text, head);
	p += head;
	p += sprintf(p, "%s\"%s\":\"", head > 1 ? "," : "", field);
	p = base64_encode_into(data, len, p);
	*p++ = '"';
	*p++ = '}';
	*p = '\0';
	req->body = buf;
	req->body_len = p - buf;
	free(text);
	json_decref(body);
	mesh_http_add_header(req, "Content-Type: application/json");
}

/* Percent-encode a path or query value so it travels intact. */
char *
mesh_url_encode(const char *s)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/')
			appendStringInfoChar(&buf, (char) c);
		else
			appendStringInfo(&buf, "%%%02X", c);
	}
	return buf.data;
}

/*
 * The failure an HTTP status of a vendor API (Docker Engine, Kubernetes API
 * server) stands for, when its body says no more: missing, not running, a
 * quota, credentials the operator must fix (the backend is unusable as
 * configured), the request itself, or the server.
 */
MeshFailure
mesh_failure_for_http_status(long status)
{
	if (status == 404)
		return MESH_FAIL_NOT_FOUND;
	if (status == 409)
		return MESH_FAIL_NOT_RUNNING;
	if (status == 429)
		return MESH_FAIL_NO_RESOURCES;
	if (status == 401 || status == 403)
		return MESH_FAIL_UNAVAILABLE;
	if (status >= 400 && status < 500)
		return MESH_FAIL_BAD_REQUEST;
	return MESH_FAIL_UNAVAILABLE;
}

void
mesh_error_set(MeshError *err, MeshFailure failure, const char *fmt,...)
{
	va_list		ap;
	char		buf[1024];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	err->failure = failure;
	err->message = pstrdup(buf);
	err->reason = NULL;
	err->code = NULL;
}

/*
 * For the acquire builder of a driver without snapshots: false, with the
 * reason, when asked to stand a workspace on one.  The layer above never
 * asks (the capability is not declared); a request that did is refused
 * rather than started empty.
 */
bool
mesh_acquire_without_snapshot(const MeshBackend *be, const MeshAcquireSpec *spec, MeshError *err)
{
	if (spec->snapshot == NULL)
		return true;
	mesh_error_set(err, MESH_FAIL_BAD_REQUEST, "backend \"%s\" cannot start a workspace on a snapshot",
				   be->name);
	return false;
}

/*
 * Error codes that are domain errors a harness can act on, whatever the
 * HTTP status (docs/protocol.md).
 */
static const struct
{
	const char *code;
	MeshFailure failure;
}			domain_codes[] =
{
	{"permission_denied", MESH_FAIL_PERMISSION},
	{"name_too_long", MESH_FAIL_NAME_TOO_LONG},
	{"argument_list_too_long", MESH_FAIL_ARGS_TOO_LONG},
	{"release_incomplete", MESH_FAIL_RELEASE_INCOMPLETE},
};

/* The failure class of an error answer: its code where the code is known, else its status. */
static MeshFailure
classify_error(long status, const char *code)
{
	for (size_t i = 0; code && i < lengthof(domain_codes); i++)
		if (strcmp(code, domain_codes[i].code) == 0)
			return domain_codes[i].failure;
	if (status == 404 && code && strcmp(code, "file_not_found") == 0)
		return MESH_FAIL_NOT_FOUND;
	if (status == 404 && code && strcmp(code, "workspace_not_found") == 0)
		return MESH_FAIL_NOT_FOUND;
	if (code && (strcmp(code, "path_refused") == 0 || strcmp(code, "is_a_directory") == 0))
		return MESH_FAIL_PATH_REFUSED;
	if (status == 413)
		return MESH_FAIL_TOO_LARGE;
	if (status == 409)
		return MESH_FAIL_NOT_RUNNING;
	if (status == 429 || (status == 503 && code && strcmp(code, "out_of_resources") == 0))
		return MESH_FAIL_NO_RESOURCES;	/* no room now */
	if (status == 401 || status == 403)
		return MESH_FAIL_UNAVAILABLE;
	if (status >= 400 && status < 500)
		return MESH_FAIL_BAD_REQUEST;
	if (status == 507)
		return MESH_FAIL_NO_RESOURCES;
	return MESH_FAIL_UNAVAILABLE;
}

/*
 * Turn a non-2xx answer, or a transport failure, into a MeshError.  Backends
 * that answer {"error":{"code","message"}} get their code classified; the
 * backend's own message is kept because it says what was wrong with the input.
 * Returns true when the response was a success (2xx) and nothing was set.
 */
bool
mesh_http_error_from_json(const MeshHttpResponse *resp, const char *backend, MeshError *err)
{
	json_t	   *doc;
	const char *code = NULL;
	const char *message = NULL;
	MeshFailure failure;

	if (resp->out_of_descriptors)
	{
		mesh_error_set(err, MESH_FAIL_NO_RESOURCES, "backend \"%s\" was not called: %s",
					   backend, resp->transport_error);
		return false;
	}
	if (resp->transport_error)
	{
		mesh_error_set(err, MESH_FAIL_UNAVAILABLE, "backend \"%s\" cannot be reached: %s",
					   backend, resp->transport_error);
		return false;
	}
	if (resp->status >= 200 && resp->status < 300)
		return true;

	doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
	if (doc)
		json_unpack(doc, "{s:{s?s,s?s}}", "error", "code", &code, "message", &message);

	failure = classify_error(resp->status, code);
	mesh_error_set(err, failure, "backend \"%s\" answered HTTP %ld%s%s%s%s",
				   backend, resp->status,
				   code ? " " : "", code ? code : "",
				   message ? ": " : "", message ? message : "");
	err->reason = pstrdup(message ? message : (code ? code : "no reason given"));
	err->code = code ? pstrdup(code) : NULL;
	if (doc)
		json_decref(doc);
	return false;
}

/* A single-request operation's result, as a step. */
MeshStepResult
mesh_step(bool ok)
{
	return ok ? MESH_STEP_DONE : MESH_STEP_FAILED;
}

static const char b64chars[] =
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Encode into out, which has room for ((len + 2) / 3) * 4 + 1; returns its end. */
static char *
base64_encode_into(const char *data, size_t len, char *out)
{
	const unsigned char *in = (const unsigned char *) data;
	char	   *p = out;
	size_t		i;

	for (i = 0; i + 2 < len; i += 3)
	{
		*p++ = b64chars[in[i] >> 2];
		*p++ = b64chars[((in[i] & 3) << 4) | (in[i + 1] >> 4)];
		*p++ = b64chars[((in[i + 1] & 15) << 2) | (in[i + 2] >> 6)];
		*p++ = b64chars[in[i + 2] & 63];
	}
	if (i < len)
	{
		*p++ = b64chars[in[i] >> 2];
		if (i + 1 < len)
		{
			*p++ = b64chars[((in[i] & 3) << 4) | (in[i + 1] >> 4)];
			*p++ = b64chars[(in[i + 1] & 15) << 2];
		}
		else
		{
			*p++ = b64chars[(in[i] & 3) << 4];
			*p++ = '=';
		}
		*p++ = '=';
	}
	*p = '\0';
	return p;
}

/* Base64 as the daemon sends it (padded); PostgreSQL's decoder, one table lookup a character. */
bool
mesh_base64_decode(const char *text, char **out, size_t *outlen)
{
	size_t		len = strlen(text);
	int			n;

	if (len > (size_t) INT_MAX)
		return false;
	*out = palloc(pg_b64_dec_len((int) len) + 1);
	n = pg_b64_decode(text, (int) len, *out, pg_b64_dec_len((int) len));
	if (n < 0)
		return false;
	*outlen = (size_t) n;
	return true;
}

/*
 * mesh.validate_backend_config(driver, config): raise a clear error naming
 * the bad field, used by the admin functions before a config is stored.
 */
PG_FUNCTION_INFO_V1(mesh_validate_backend_config);
Datum
mesh_validate_backend_config(PG_FUNCTION_ARGS)
{
	char	   *driver_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *config = PG_GETARG_JSONB_P(1);
	const MeshDriver *driver = mesh_driver_lookup(driver_name);
	char	   *config_text;
	json_t	   *doc;
	const char *problem;

	if (driver == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown backend driver \"%s\"", driver_name),
				 errhint("See mesh.drivers() for the drivers this build has.")));

	config_text = JsonbToCString(NULL, &config->root, VARSIZE(config));
	doc = json_loads(config_text, 0, NULL);
	if (doc == NULL || !json_is_object(doc))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backend config must be a JSON object")));
	problem = driver->validate_config(doc);
	if (problem)
	{
		char	   *copy = pstrdup(problem);

		json_decref(doc);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid config for driver \"%s\": %s", driver_name, copy)));
	}
	json_decref(doc);
	PG_RETURN_VOID();
}

/* mesh.drivers(): the drivers compiled into this build. */
PG_FUNCTION_INFO_V1(mesh_drivers);
Datum
mesh_drivers(PG_FUNCTION_ARGS)
{
	Datum	   *names = palloc(sizeof(Datum) * lengthof(drivers));

	for (size_t i = 0; i < lengthof(drivers); i++)
		names[i] = CStringGetTextDatum(drivers[i]->name);
	PG_RETURN_ARRAYTYPE_P(construct_array(names, lengthof(drivers), TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * mesh.driver_capabilities(driver, config): what DRIVER declares for a backend
 * of CONFIG, as the capabilities JSON a workspace row records, without any
 * backend call: the catalog shows it (mesh.backend_catalog) so that an
 * operator, a harness's router or the conformance suite learns that a backend
 * cannot run a shell before sending it one.  NULL for a driver this build
 * does not have.
 */
PG_FUNCTION_INFO_V1(mesh_driver_capabilities);
Datum
mesh_driver_capabilities(PG_FUNCTION_ARGS)
{
	char	   *driver_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *config = PG_GETARG_JSONB_P(1);
	const MeshDriver *driver = mesh_driver_lookup(driver_name);
	MeshBackend be;
	MeshCapabilities caps;

	if (driver == NULL)
		PG_RETURN_NULL();
	memset(&be, 0, sizeof(be));
	be.driver = driver;
	be.config = json_loads(JsonbToCString(NULL, &config->root, VARSIZE(config)), 0, NULL);
	driver->declared_capabilities(&be, &caps);
	if (be.config)
		json_decref(be.config);
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(mesh_capabilities_text(&caps))));
}
