/*-------------------------------------------------------------------------
 *
 * broker.c
 *	  The credential broker: a sandbox exchanges its run token for one
 *	  named secret it was granted, and every exchange is a row.
 *
 * A background worker serves HTTP on one unix socket per workspace that
 * holds a live run token: mesh_broker/<workspace>/broker.sock in the data
 * directory.  mesh-sandboxd shows each workspace only its own directory, at
 * /run/mesh, so the socket a request arrives on says which workspace asks,
 * and a token presented from any other workspace is refused.  The sockets
 * are world-connectable: the token is the authentication, and the database
 * keeps only its hash.
 *
 *	  POST /v1/secrets/{name}     Authorization: Bearer <run token>
 *	  200 {"name": ..., "value": ...}
 *	  401 {"error": {"code": "no_token", ...}}
 *	  403 {"error": {"code": "refused", "message": <why>}}
 *
 * and, for repositories, POST /v1/repositories/{host}/{owner}/{name}/token
 * (broker_repos.c).
 *
 * libmicrohttpd runs without threads or listening sockets of its own: this
 * worker accepts, hands each connection over with the workspace as its
 * client address, and drives the library from its wait loop; requests are
 * handled on this thread, inside PG_TRY, so no PostgreSQL error ever
 * unwinds through the library.  Each workspace may hold a few connections
 * at a time (its share of the library's limit); one more is answered 503
 * too_many_connections, so idle connections of one workspace never starve
 * another's secret fetches.  The set of sockets is refreshed when a
 * worker mints a token (it sets this worker's latch) and every half minute.
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
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "broker_repos.h"
#include "credentials.h"
#include "handoff.h"
#include "settings.h"
#include "txn.h"

#define BROKER_DIR "mesh_broker"
#define BROKER_SOCKET "broker.sock"
#define SECRETS_PREFIX "/v1/secrets/"
#define MAX_WORKSPACE_SOCKETS 1024
#define REFRESH_MS 30000
#define MAX_CONNECTIONS 256
/* a workspace's share: MAX_CONNECTIONS / CONNECTIONS_PER_WORKSPACE hoarders leave room */
#define CONNECTIONS_PER_WORKSPACE 8

/* One listening socket, for one workspace, and the connections it has open. */
typedef struct WorkspaceSocket
{
	char	   *ref;
	int			fd;
	int			connections;
} WorkspaceSocket;

static WorkspaceSocket sockets[MAX_WORKSPACE_SOCKETS];
static int	nsockets = 0;
static char *broker_root;

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

static const char exchange_sql[] =
"SELECT granted, value, reason FROM mesh.broker_exchange(pg_catalog.decode($1, 'hex'), $2, $3)";

/*
 * Ask the database: mesh.broker_exchange decides and records the event, in
 * a transaction of its own, committed durably (a read is a row).  The value
 * is copied out with malloc and wiped from the rows it came in.
 */
static void
exchange(const char *token, const char *name, const char *ref, Exchange *out)
{
	MeshParam	p[3] = {mesh_text_param(mesh_token_hash_hex(token)), mesh_text_param(name),
	mesh_text_param(ref)};
	MeshRows   *rows;
	ErrorData  *err;

	memset(out, 0, sizeof(*out));
	if (!mesh_txn_sql("mesh broker: exchange", MESH_COMMIT_DURABLE, exchange_sql, 3, p, &rows, &err))
	{
		ereport(LOG, (errmsg("mesh broker: %s", err->message)));
		FreeErrorData(err);
		out->granted = false;
		out->reason = pstrdup("internal error; see the server log");
		return;
	}
	if (rows->n != 1)
	{
		ereport(LOG, (errmsg("mesh broker: mesh.broker_exchange returned %llu rows",
							 (unsigned long long) rows->n)));
		out->granted = false;
		out->reason = pstrdup("internal error; see the server log");
		return;
	}
	out->granted = mesh_col_bool(rows, 0, "granted");
	out->reason = mesh_col_text(rows, 0, "reason");
	if (!mesh_col_isnull(rows, 0, "value"))
	{
		char	   *value = mesh_col_text(rows, 0, "value");

		out->value = strdup(value);
		explicit_bzero(value, strlen(value));
	}
	explicit_bzero(rows->rows[0]->t_data, rows->rows[0]->t_len);
}

/* The workspace whose socket the connection came in on (its client address). */
static const char *
workspace_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

	return ((const struct sockaddr_un *) info->client_addr)->sun_path;
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
	if (strncmp(url, MESH_BROKER_REPOS_PREFIX, strlen(MESH_BROKER_REPOS_PREFIX)) == 0)
	{
		json_t	   *answer;
		unsigned int status;

		if (strcmp(method, "POST") != 0)
			return send_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", "use POST");
		token = bearer_token(conn);
		if (token == NULL)
			return send_error(conn, MHD_HTTP_UNAUTHORIZED, "no_token",
							  "send the run token as Authorization: Bearer <token>");
		status = mesh_broker_repository_token(url, token, workspace_of(conn), &answer);
		return send_json(conn, status, answer);
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

	exchange(token, name, workspace_of(conn), &ex);
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
	int			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(addr.sun_path))
	{
		close(fd);
		return -1;
	}
	strlcpy(addr.sun_path, path, sizeof(addr.sun_path));
	unlink(path);
	if (bind(fd, (struct sockaddr *) &addr, sizeof(addr)) != 0 || chmod(path, 0666) != 0 ||
		listen(fd, 64) != 0)
	{
		close(fd);
		return -1;
	}
	return fd;
}

static char *
socket_path_of(const char *ref)
{
	return psprintf("%s/%s/%s", broker_root, ref, BROKER_SOCKET);
}

/*
 * Start listening for one workspace, in the directory mesh-sandboxd made for
 * it and shows its sandbox at /run/mesh.  No directory means no sandbox
 * could see a socket there (another backend, or the workspace was just
 * released and its directory removed): nothing to listen for.
 */
static void
open_workspace_socket(const char *ref)
{
	char	   *dir = psprintf("%s/%s", broker_root, ref);
	struct stat st;
	int			fd;

	if (nsockets >= MAX_WORKSPACE_SOCKETS || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return;
	fd = listen_on_socket(socket_path_of(ref));
	if (fd < 0)
	{
		ereport(LOG, (errmsg("mesh broker: could not listen for workspace %s: %m", ref)));
		return;
	}
	sockets[nsockets].ref = MemoryContextStrdup(TopMemoryContext, ref);
	sockets[nsockets].fd = fd;
	sockets[nsockets].connections = 0;
	nsockets++;
}

/*
 * Stop listening for a workspace whose tokens are all dead.  Its directory
 * stays while the workspace lives: its sandbox sees that very directory,
 * so a token minted after a rotation must be served there again.
 */
static void
close_workspace_socket(int i)
{
	close(sockets[i].fd);
	unlink(socket_path_of(sockets[i].ref));
	pfree(sockets[i].ref);
	sockets[i] = sockets[--nsockets];
}

static const char live_refs_sql[] =
"SELECT DISTINCT w.external_ref FROM mesh.run_tokens t JOIN mesh.workspaces w ON w.run_id = t.run_id "
" WHERE t.revoked_at IS NULL AND t.expires_at > pg_catalog.now() AND w.external_ref IS NOT NULL "
"   AND w.status OPERATOR(pg_catalog.<>) ALL ('{released,failed}')";

/* The workspaces that hold a live token right now; *ok false when that is unknown. */
static List *
live_workspaces(bool *ok)
{
	MeshRows   *rows;
	ErrorData  *err;
	List	   *refs = NIL;

	/* read-only: nothing to commit, durably or not */
	*ok = mesh_txn_sql("mesh broker: refresh", MESH_COMMIT_DURABLE, live_refs_sql, 0, NULL, &rows, &err);
	if (!*ok)
	{
		FreeErrorData(err);		/* e.g. the extension is not installed yet */
		return NIL;
	}
	for (uint64 r = 0; r < rows->n; r++)
		refs = lappend(refs, mesh_col_text(rows, r, "external_ref"));
	return refs;
}

static bool
ref_in(List *refs, const char *ref)
{
	ListCell   *lc;

	foreach(lc, refs)
		if (strcmp((char *) lfirst(lc), ref) == 0)
			return true;
	return false;
}

/* Listen exactly for the workspaces that hold a live token. */
static void
refresh_sockets(void)
{
	bool		ok;
	List	   *refs = live_workspaces(&ok);
	ListCell   *lc;

	if (!ok)
		return;					/* e.g. the extension is not installed yet */
	for (int i = nsockets - 1; i >= 0; i--)
		if (!ref_in(refs, sockets[i].ref))
			close_workspace_socket(i);
	foreach(lc, refs)
	{
		bool		have = false;

		for (int i = 0; i < nsockets && !have; i++)
			have = strcmp(sockets[i].ref, (char *) lfirst(lc)) == 0;
		if (!have)
			open_workspace_socket((char *) lfirst(lc));
	}
	list_free_deep(refs);
}

/* The listening socket of workspace REF, or NULL once it is closed. */
static WorkspaceSocket *
socket_of(const char *ref)
{
	for (int i = 0; i < nsockets; i++)
		if (strcmp(sockets[i].ref, ref) == 0)
			return &sockets[i];
	return NULL;
}

/*
 * The library closed a connection: give it back to its workspace's share
 * (its client address names the workspace).
 */
static void
connection_closed(void *cls, struct MHD_Connection *conn, void **socket_context,
				  enum MHD_ConnectionNotificationCode toe)
{
	const char *ref;
	WorkspaceSocket *ws;

	if (toe != MHD_CONNECTION_NOTIFY_CLOSED)
		return;
	ref = workspace_of(conn);
	ws = ref ? socket_of(ref) : NULL;
	if (ws && ws->connections > 0)
		ws->connections--;
}

/*
 * Refuse a connection over its workspace's share with a clear answer: the
 * workspace hoarding connections learns why, and no other workspace waits.
 */
static void
refuse_connection(int fd)
{
	static const char answer[] =
		"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
		"Connection: close\r\n\r\n"
		"{\"error\": {\"code\": \"too_many_connections\", \"message\": \"this workspace "
		"already has " CppAsString2(CONNECTIONS_PER_WORKSPACE) " connections open to the broker; "
		"close idle ones\"}}\n";

	(void) send(fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
}

/*
 * Hand a new connection to the library, with its workspace as the client
 * address, within the workspace's share of connections.
 */
static void
accept_connection(struct MHD_Daemon *http, WorkspaceSocket *ws)
{
	struct sockaddr_un from;
	int			fd = accept4(ws->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (ws->connections >= CONNECTIONS_PER_WORKSPACE)
	{
		refuse_connection(fd);
		return;
	}
	memset(&from, 0, sizeof(from));
	from.sun_family = AF_UNIX;
	strlcpy(from.sun_path, ws->ref, sizeof(from.sun_path));
	if (MHD_add_connection(http, fd, (struct sockaddr *) &from, sizeof(from)) != MHD_YES)
		close(fd);
	else
		ws->connections++;
}

static struct MHD_Daemon *
start_http(void)
{
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET,
											0, NULL, NULL, handle_request, NULL,
											MHD_OPTION_CONNECTION_LIMIT, (unsigned int) MAX_CONNECTIONS,
											MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 10,
											MHD_OPTION_NOTIFY_CONNECTION, connection_closed, NULL,
											MHD_OPTION_END);

	if (d == NULL)
		ereport(ERROR, (errmsg("mesh broker: could not start the HTTP server")));
	return d;
}

/*
 * Where a workspace's broker socket lives, for the worker that must not let
 * a command run before the broker listens for it.
 */
char *
mesh_broker_socket_path(const char *ref)
{
	return psprintf("%s/%s/%s/%s", DataDir, BROKER_DIR, ref, BROKER_SOCKET);
}

/*
 * A workspace was released: remove its broker directory, which mesh-sandboxd
 * made for it, so directories do not pile up one per workspace ever
 * created; and the broker's socket in it, which the broker then stops
 * serving at its next refresh (the caller wakes it) without making the
 * directory again.  Missing ones (other backends) are fine.
 */
void
mesh_broker_forget_workspace(const char *ref)
{
	char	   *dir = psprintf("%s/%s/%s", DataDir, BROKER_DIR, ref);
	char	   *sock = mesh_broker_socket_path(ref);

	(void) unlink(sock);
	if (rmdir(dir) != 0 && errno != ENOENT)
		ereport(LOG, (errmsg("mesh: could not remove broker directory \"%s\": %m", dir)));
	pfree(sock);
	pfree(dir);
}

/*
 * A worker that minted a token waits for the broker to listen for its
 * workspace (broker_listening in worker_acquire.c): wake the workers once
 * the sockets are refreshed, so the wait ends without polling.
 */
static void
wake_workers(void)
{
	for (int i = 0; i < mesh_shared->nworkers; i++)
	{
		MeshWorkerSlot *slot = &mesh_shared->workers[i];
		int			procno = -1;

		SpinLockAcquire(&slot->mutex);
		if (slot->pid != 0)
			procno = slot->procno;
		SpinLockRelease(&slot->mutex);
		if (procno >= 0)
			SetLatch(&ProcGlobal->allProcs[procno].procLatch);
	}
}

static void
broker_exit(int code, Datum arg)
{
	mesh_shared->broker_procno = -1;
}

/* a background worker's entry point, named in its registration (mesh_exec.c) */
PGDLLEXPORT void mesh_broker_main(Datum arg);

void
mesh_broker_main(Datum arg)
{
	struct MHD_Daemon *http;
	int			epoll_fd;
	TimestampTz next_refresh = 0;
	bool		refresh_asked = false;	/* a worker minted a token and waits */
	MemoryContext loop_cxt;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	mesh_worker_connect("mesh broker");

	broker_root = psprintf("%s/%s", DataDir, BROKER_DIR);
	if (mkdir(broker_root, 0755) != 0 && errno != EEXIST)
		ereport(ERROR, (errmsg("mesh broker: could not create %s: %m", broker_root)));
	chmod(broker_root, 0755);
	http = start_http();
	epoll_fd = MHD_get_daemon_info(http, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
	mesh_shared->broker_procno = MyProc->pgprocno;
	before_shmem_exit(broker_exit, (Datum) 0);
	ereport(LOG, (errmsg("mesh broker serving workspaces under %s", broker_root)));
	/* what one turn of the loop allocates (requests, refreshes) is freed with it */
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "mesh broker loop", ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		WaitEventSet *set;
		WaitEvent	events[16];
		MHD_UNSIGNED_LONG_LONG mhd_timeout;
		long		timeout = REFRESH_MS;
		int			n;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(loop_cxt);
		MemoryContextSwitchTo(loop_cxt);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (GetCurrentTimestamp() >= next_refresh)
		{
			refresh_sockets();
			mesh_broker_revoke_pending();
			next_refresh = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REFRESH_MS);
			if (refresh_asked)
				wake_workers();
			refresh_asked = false;
		}
		MHD_run(http);
		if (MHD_get_timeout(http, &mhd_timeout) == MHD_YES)
			timeout = (long) Min(mhd_timeout, (MHD_UNSIGNED_LONG_LONG) REFRESH_MS);
		set = CreateWaitEventSet(CurrentMemoryContext, nsockets + 3);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(set, WL_SOCKET_READABLE, epoll_fd, NULL, NULL);
		for (int i = 0; i < nsockets; i++)
			AddWaitEventToSet(set, WL_SOCKET_READABLE, sockets[i].fd, NULL, &sockets[i]);
		timeout = mesh_wait_for_stats(timeout);
		n = WaitEventSetWait(set, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		for (int i = 0; i < n; i++)
		{
			if (events[i].events & WL_LATCH_SET)
			{
				next_refresh = 0;	/* a worker minted a token: listen for it now */
				refresh_asked = true;
			}
			else if (events[i].user_data != NULL)
				accept_connection(http, (WorkspaceSocket *) events[i].user_data);
		}
		FreeWaitEventSet(set);
		ResetLatch(MyLatch);
	}
}
