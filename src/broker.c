/*-------------------------------------------------------------------------
 *
 * broker.c
 *	  The credential broker: a sandbox exchanges its run token for one
 *	  named secret it was granted, and every exchange is a row.
 *
 * A background worker serves HTTP on a unix socket in the data directory
 * (mesh_broker/broker.sock), which mesh-sandboxd binds into each workspace
 * at /run/mesh/broker.sock.  The socket is world-connectable on purpose:
 * the run token is the authentication, and the database keeps only its
 * hash.
 *
 *	  POST /v1/secrets/{name}     Authorization: Bearer <run token>
 *	  200 {"name": ..., "value": ...}
 *	  401 {"error": {"code": "no_token", ...}}
 *	  403 {"error": {"code": "refused", "message": <why>}}
 *
 * libmicrohttpd runs without threads of its own: its epoll descriptor
 * joins this worker's wait set, and requests are handled on this thread,
 * inside PG_TRY, so no PostgreSQL error ever unwinds through the library.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <microhttpd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "credentials.h"
#include "mesh_exec.h"

#define BROKER_DIR "mesh_broker"
#define BROKER_SOCKET "broker.sock"
#define SECRETS_PREFIX "/v1/secrets/"

/* What one exchange decided. */
typedef struct Exchange
{
	bool		granted;
	char	   *value;			/* malloc'd, wiped after sending */
	char	   *reason;
} Exchange;

/* Zero a response body holding a secret before it is freed. */
static void
wipe_and_free(void *cls)
{
	char	   *body = (char *) cls;

	explicit_bzero(body, strlen(body));
	free(body);
}

static enum MHD_Result
send_json(struct MHD_Connection *conn, unsigned int status, json_t *doc)
{
	char	   *body = json_dumps(doc, JSON_COMPACT);
	struct MHD_Response *resp;
	enum MHD_Result ret;

	json_decref(doc);
	resp = MHD_create_response_from_buffer_with_free_callback(strlen(body), body, wipe_and_free);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
send_error(struct MHD_Connection *conn, unsigned int status, const char *code, const char *message)
{
	return send_json(conn, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message));
}

/*
 * Ask the database: mesh.broker_exchange decides and records the event, in
 * a transaction of its own, committed durably (a read is a row).
 */
static void
exchange(const char *token, const char *name, Exchange *out)
{
	MemoryContext outer = CurrentMemoryContext;
	char	   *hash = mesh_token_hash_hex(token);

	memset(out, 0, sizeof(*out));
	PG_TRY();
	{
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2] = {CStringGetTextDatum(hash), CStringGetTextDatum(name)};

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		SPI_connect();
		pgstat_report_activity(STATE_RUNNING, "mesh broker: exchange");
		if (SPI_execute_with_args("SELECT granted, value, reason FROM mesh.broker_exchange(decode($1, 'hex'), $2)",
								  2, types, values, NULL, false, 1) != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "mesh broker: exchange failed");
		{
			HeapTuple	tuple = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			char	   *granted = SPI_getvalue(tuple, desc, 1);
			char	   *value = SPI_getvalue(tuple, desc, 2);
			char	   *reason = SPI_getvalue(tuple, desc, 3);

			out->granted = granted && strcmp(granted, "t") == 0;
			out->value = value ? strdup(value) : NULL;
			out->reason = reason ? MemoryContextStrdup(outer, reason) : NULL;
			if (value)
				explicit_bzero(value, strlen(value));
		}
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *err;

		MemoryContextSwitchTo(outer);
		err = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(LOG, (errmsg("mesh broker: %s", err->message)));
		FreeErrorData(err);
		out->granted = false;
		out->reason = pstrdup("internal error; see the server log");
	}
	PG_END_TRY();
	MemoryContextSwitchTo(outer);
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/* The token from "Authorization: Bearer <token>", or NULL. */
static const char *
bearer_token(struct MHD_Connection *conn)
{
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0 || auth[7] == '\0')
		return NULL;
	return auth + 7;
}

static enum MHD_Result
handle_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			   const char *version, const char *upload_data, size_t *upload_data_size,
			   void **con_cls)
{
	static int	marker;
	const char *token;
	const char *name;
	Exchange	ex;
	enum MHD_Result ret;

	if (*con_cls == NULL)
	{
		*con_cls = &marker;		/* headers seen; answer once the body is in */
		return MHD_YES;
	}
	if (*upload_data_size > 0)
	{
		*upload_data_size = 0;	/* no body is needed: ignore it */
		return MHD_YES;
	}
	if (strncmp(url, SECRETS_PREFIX, strlen(SECRETS_PREFIX)) != 0 || url[strlen(SECRETS_PREFIX)] == '\0')
		return send_error(conn, MHD_HTTP_NOT_FOUND, "not_found", "use POST /v1/secrets/{name}");
	if (strcmp(method, "POST") != 0)
		return send_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", "use POST");
	name = url + strlen(SECRETS_PREFIX);
	token = bearer_token(conn);
	if (token == NULL)
		return send_error(conn, MHD_HTTP_UNAUTHORIZED, "no_token",
						  "send the run token as Authorization: Bearer <token>");

	exchange(token, name, &ex);
	if (!ex.granted)
		return send_error(conn, MHD_HTTP_FORBIDDEN, "refused", ex.reason ? ex.reason : "refused");
	ret = send_json(conn, MHD_HTTP_OK, json_pack("{s:s,s:s}", "name", name, "value", ex.value));
	explicit_bzero(ex.value, strlen(ex.value));
	free(ex.value);
	return ret;
}

/* A unix socket anyone may connect to: the run token is the authentication. */
static int
listen_on_socket(const char *path)
{
	struct sockaddr_un addr;
	int			fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0)
		ereport(ERROR, (errmsg("mesh broker: could not create a socket: %m")));
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(addr.sun_path))
		ereport(ERROR, (errmsg("mesh broker: socket path \"%s\" is too long", path)));
	strlcpy(addr.sun_path, path, sizeof(addr.sun_path));
	unlink(path);
	if (bind(fd, (struct sockaddr *) &addr, sizeof(addr)) != 0 || chmod(path, 0666) != 0 ||
		listen(fd, 64) != 0)
		ereport(ERROR, (errmsg("mesh broker: could not listen on %s: %m", path)));
	return fd;
}

static struct MHD_Daemon *
start_http(int listen_fd)
{
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_TURBO, 0, NULL, NULL,
											handle_request, NULL,
											MHD_OPTION_LISTEN_SOCKET, listen_fd,
											MHD_OPTION_CONNECTION_LIMIT, (unsigned int) 256,
											MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 10,
											MHD_OPTION_END);

	if (d == NULL)
		ereport(ERROR, (errmsg("mesh broker: could not start the HTTP server")));
	return d;
}

void
mesh_broker_main(Datum arg)
{
	char	   *dir;
	char	   *path;
	struct MHD_Daemon *http;
	int			epoll_fd;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(mesh_database, NULL, 0);
	pgstat_report_appname("mesh broker");

	dir = psprintf("%s/%s", DataDir, BROKER_DIR);
	path = psprintf("%s/%s", dir, BROKER_SOCKET);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		ereport(ERROR, (errmsg("mesh broker: could not create %s: %m", dir)));
	chmod(dir, 0755);
	http = start_http(listen_on_socket(path));
	epoll_fd = MHD_get_daemon_info(http, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
	ereport(LOG, (errmsg("mesh broker listening on %s", path)));

	for (;;)
	{
		WaitEventSet *set;
		WaitEvent	events[4];
		MHD_UNSIGNED_LONG_LONG mhd_timeout;
		long		timeout = -1;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MHD_run(http);
		if (MHD_get_timeout(http, &mhd_timeout) == MHD_YES)
			timeout = (long) Min(mhd_timeout, (MHD_UNSIGNED_LONG_LONG) 60000);
		set = CreateWaitEventSet(CurrentMemoryContext, 3);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(set, WL_SOCKET_READABLE, epoll_fd, NULL, NULL);
		(void) WaitEventSetWait(set, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		FreeWaitEventSet(set);
		ResetLatch(MyLatch);
	}
}
