/*-------------------------------------------------------------------------
 *
 * worker_http.c
 *	  libcurl multi inside a background worker.
 *
 * curl tells us which sockets it waits on (CURLMOPT_SOCKETFUNCTION) and
 * when it wants to be called back regardless (CURLMOPT_TIMERFUNCTION).  The
 * sockets go into an epoll set of our own, whose one descriptor sits in the
 * process's WaitEventSet beside the latch (mesh_http_socket), and the timer
 * becomes the wait's timeout (mesh_http_timeout): a process sleeps until a
 * socket is ready, curl's timer is due or the latch is set, with no polling
 * and no limit on descriptor numbers.  mesh_http_drive() then hands curl
 * exactly the sockets that are ready.  Connections are reused across calls
 * by the multi handle's connection cache.
 *
 * Every curl call's result is checked.  Callbacks that curl invokes only
 * touch malloc'd memory and never raise an error: an ereport longjmp
 * through libcurl would corrupt it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <curl/curl.h>

#include "utils/timestamp.h"

#include "worker_http.h"

/* CURLOPT_PROTOCOLS_STR, which keeps a credential on http(s), came with 7.85. */
StaticAssertDecl(LIBCURL_VERSION_NUM >= 0x075500,
				 "mesh_exec needs libcurl 7.85 or later (CURLOPT_PROTOCOLS_STR)");

struct MeshTransfer
{
	CURL	   *easy;
	struct curl_slist *headers;
	char	   *body;			/* malloc'd response body */
	size_t		body_len;
	size_t		body_cap;
	size_t		max_response;
	bool		overflow;
	bool		done;
	bool		in_multi;		/* added to the multi handle, not yet removed */
	CURLcode	result;
	const char *setup_error;	/* curl refused to set the transfer up: why */
	long		status;
	char		errbuf[CURL_ERROR_SIZE];
	char	   *unix_socket;	/* malloc'd copy, for error messages */
	int			socket_errno;	/* why the last socket could not be opened, or 0 */
	long		timeout_ms;		/* the transfer's deadline, from its start */
};

static CURLM *multi = NULL;
static int	epoll_fd = -1;		/* the sockets curl waits on */
static TimestampTz timer_due = -1;	/* when curl wants its timeout action; -1: never */

/*
 * Collect a response body, refusing more than the operation's limit.  A body
 * of announced length is allocated once at that size, so it is never grown
 * by copying; others grow by doubling.
 */
static size_t
write_callback(char *data, size_t size, size_t nmemb, void *userp)
{
	MeshTransfer *t = (MeshTransfer *) userp;
	size_t		n = size * nmemb;
	size_t		need = t->body_len + n + 1;

	if (t->body_len + n > t->max_response)
	{
		t->overflow = true;
		return 0;				/* makes curl fail the transfer */
	}
	if (need > t->body_cap)
	{
		curl_off_t	announced = -1;
		size_t		cap = Max(Max(t->body_cap * 2, need), 4096);
		char	   *grown;

		if (t->body == NULL &&
			curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced) == CURLE_OK &&
			announced >= 0 && (size_t) announced + 1 >= need)
			cap = (size_t) announced + 1;
		grown = realloc(t->body, cap);
		if (grown == NULL)
			return 0;
		t->body = grown;
		t->body_cap = cap;
	}
	memcpy(t->body + t->body_len, data, n);
	t->body_len += n;
	t->body[t->body_len] = '\0';
	return n;
}

/*
 * curl's view of one socket changed: mirror it in the epoll set.  Returns -1
 * when the set refuses it, which fails the transfers on that socket.
 */
static int
socket_callback(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct epoll_event ev = {0};

	if (what == CURL_POLL_REMOVE)
	{
		/* curl may already have closed it: nothing to undo then */
		(void) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	ev.data.fd = fd;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev.events |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev.events |= EPOLLOUT;
	if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev) == 0)
		return 0;
	if (errno == ENOENT && epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0)
		return 0;
	return -1;
}

/* curl wants its timeout action in timeout_ms (-1: no timer). */
static int
timer_callback(CURLM *m, long timeout_ms, void *userp)
{
	timer_due = timeout_ms < 0 ? -1
		: TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

static void
check_multi(CURLMcode rc, const char *what)
{
	if (rc != CURLM_OK)
		elog(ERROR, "mesh: libcurl %s failed: %s", what, curl_multi_strerror(rc));
}

/*
 * Set up this process's HTTP engine (once).  The library in use must be as
 * recent as the headers this was built against require.
 */
void
mesh_http_init(void)
{
	curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);

	if (info->version_num < 0x075500)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("mesh_exec needs libcurl 7.85 or later, this server loaded %s", info->version)));
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		elog(ERROR, "mesh: could not initialise libcurl");
	epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (epoll_fd < 0)
		elog(ERROR, "mesh: could not create an epoll set: %m");
	multi = curl_multi_init();
	if (multi == NULL)
		elog(ERROR, "mesh: could not initialise libcurl");
	check_multi(curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) MESH_HTTP_CONNECTION_CACHE), "setting the connection cache");
	check_multi(curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, socket_callback), "setting the socket callback");
	check_multi(curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_callback), "setting the timer callback");
}

/*
 * curl's socket(), with its errno kept: a worker out of descriptors must
 * say so, not that the backend cannot be reached (curl reports both alike).
 */
static curl_socket_t
open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	MeshTransfer *t = (MeshTransfer *) clientp;
	curl_socket_t fd = socket(address->family, address->socktype, address->protocol);

	t->socket_errno = fd == CURL_SOCKET_BAD ? errno : 0;
	return fd;
}

/* Everything a request asks of the transfer; the first option curl refused, or CURLE_OK. */
static CURLcode
configure(MeshTransfer *t, const MeshHttpRequest *req, size_t max_response)
{
	CURL	   *easy = t->easy;
	CURLcode	rc = CURLE_OK;

	MESH_CURL_SETOPT(rc, easy, CURLOPT_URL, req->url);
	if (req->unix_socket)
		MESH_CURL_SETOPT(rc, easy, CURLOPT_UNIX_SOCKET_PATH, req->unix_socket);
	if (req->ca_pem)
	{
		struct curl_blob ca = {(void *) req->ca_pem, strlen(req->ca_pem), CURL_BLOB_COPY};

		MESH_CURL_SETOPT(rc, easy, CURLOPT_CAINFO_BLOB, &ca);
	}
	MESH_CURL_SETOPT(rc, easy, CURLOPT_CUSTOMREQUEST, req->method);
	if (strcmp(req->method, "GET") == 0)
		MESH_CURL_SETOPT(rc, easy, CURLOPT_HTTPGET, 1L);
	else
	{
		MESH_CURL_SETOPT(rc, easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
		MESH_CURL_SETOPT(rc, easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
	}
	MESH_CURL_SETOPT(rc, easy, CURLOPT_HTTPHEADER, t->headers);
	/* a body announced over the limit is refused before any of it is read */
	MESH_CURL_SETOPT(rc, easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) max_response);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_WRITEFUNCTION, write_callback);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_WRITEDATA, t);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_ERRORBUFFER, t->errbuf);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	t->timeout_ms = req->timeout_ms;
	MESH_CURL_SETOPT(rc, easy, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_NOSIGNAL, 1L);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_PRIVATE, t);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_OPENSOCKETDATA, t);
	/* never follow redirects: a credential must not travel elsewhere */
	MESH_CURL_SETOPT(rc, easy, CURLOPT_FOLLOWLOCATION, 0L);
	MESH_CURL_SETOPT(rc, easy, CURLOPT_PROTOCOLS_STR, "http,https");
	return rc;
}

/*
 * Start a transfer; it progresses in mesh_http_drive().  When curl refuses
 * to set it up, the transfer is finished at once with that error, so every
 * caller sees one kind of failure: a response without a status.
 */
MeshTransfer *
mesh_http_start(const MeshHttpRequest *req, size_t max_response)
{
	MeshTransfer *t = calloc(1, sizeof(MeshTransfer));
	struct curl_slist *h;
	CURLcode	rc;
	CURLMcode	mrc;

	if (t == NULL || (t->easy = curl_easy_init()) == NULL)
	{
		free(t);
		elog(ERROR, "mesh: out of memory starting an HTTP request");
	}
	t->max_response = max_response;
	if (req->unix_socket)
		t->unix_socket = strdup(req->unix_socket);
	for (int i = 0; i <= req->nheaders; i++)
	{
		/* no "Expect: 100-continue" round trip on uploads */
		h = curl_slist_append(t->headers, i < req->nheaders ? req->headers[i] : "Expect:");
		if (h == NULL)
		{
			t->setup_error = "out of memory building the request's headers";
			t->done = true;
			return t;
		}
		t->headers = h;
	}
	rc = configure(t, req, max_response);
	if (rc != CURLE_OK)
	{
		t->setup_error = curl_easy_strerror(rc);
		t->done = true;
		return t;
	}
	mrc = curl_multi_add_handle(multi, t->easy);
	if (mrc != CURLM_OK)
	{
		t->setup_error = curl_multi_strerror(mrc);
		t->done = true;
		return t;
	}
	t->in_multi = true;
	return t;
}

/* Take a transfer out of the multi handle; curl closes or caches its connection. */
static void
detach_transfer(MeshTransfer *t)
{
	CURLMcode	rc;

	if (!t->in_multi)
		return;
	t->in_multi = false;
	rc = curl_multi_remove_handle(multi, t->easy);
	if (rc != CURLM_OK)
		elog(LOG, "mesh: libcurl could not remove a transfer: %s", curl_multi_strerror(rc));
}

/* Stop a transfer now; the socket closes and the peer sees the disconnect. */
void
mesh_http_abort(MeshTransfer *t)
{
	if (!t->done)
	{
		detach_transfer(t);
		t->done = true;
		t->result = CURLE_ABORTED_BY_CALLBACK;
	}
}

/* Let curl act on one socket (or its timer, CURL_SOCKET_TIMEOUT). */
static void
socket_action(curl_socket_t fd, int flags)
{
	int			running;

	check_multi(curl_multi_socket_action(multi, fd, flags, &running), "socket action");
}

/* Mark the transfers curl finished; returns how many. */
static int
collect_finished(void)
{
	CURLMsg    *msg;
	int			left;
	int			completed = 0;

	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		MeshTransfer *t;

		if (msg->msg != CURLMSG_DONE ||
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t) != CURLE_OK)
			continue;
		t->result = msg->data.result;
		if (curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status) != CURLE_OK)
			t->status = 0;
		detach_transfer(t);
		t->done = true;
		completed++;
	}
	return completed;
}

/*
 * Let curl do whatever work is ready: the sockets that are, then its timer
 * if due.  Completed transfers are marked done; returns how many completed.
 */
int
mesh_http_drive(void)
{
	struct epoll_event ready[32];
	int			n;

	do
	{
		n = epoll_wait(epoll_fd, ready, lengthof(ready), 0);
		for (int i = 0; i < n; i++)
			socket_action(ready[i].data.fd,
						  ((ready[i].events & (EPOLLIN | EPOLLHUP)) ? CURL_CSELECT_IN : 0) |
						  ((ready[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
						  ((ready[i].events & EPOLLERR) ? CURL_CSELECT_ERR : 0));
	} while (n == lengthof(ready));
	if (n < 0 && errno != EINTR)
		elog(ERROR, "mesh: epoll_wait failed: %m");
	if (timer_due >= 0 && GetCurrentTimestamp() >= timer_due)
	{
		timer_due = -1;			/* the action may set a new one */
		socket_action(CURL_SOCKET_TIMEOUT, 0);
	}
	return collect_finished();
}

/* The descriptor that is readable when a socket curl waits on is ready. */
pgsocket
mesh_http_socket(void)
{
	return epoll_fd;
}

/* How long until curl's timer is due, in ms, for a wait's timeout; -1: no timer. */
long
mesh_http_timeout(void)
{
	TimestampTz now;

	if (timer_due < 0)
		return -1;
	now = GetCurrentTimestamp();
	if (now >= timer_due)
		return 0;
	/* round up, so the wait does not end just before the timer is due */
	return (long) ((timer_due - now + 999) / 1000);
}

/* Whether a transfer has finished (successfully or not). */
bool
mesh_http_is_done(MeshTransfer *t)
{
	return t->done;
}

void
mesh_http_response(MeshTransfer *t, MeshHttpResponse *resp)
{
	memset(resp, 0, sizeof(*resp));
	if (t->setup_error)
	{
		resp->transport_error = psprintf("could not set up the HTTP request: %s", t->setup_error);
		return;
	}
	if (t->overflow || t->result == CURLE_FILESIZE_EXCEEDED)
	{
		resp->transport_error = "response larger than the configured limit";
		resp->too_large = true;
		return;
	}
	if (t->result == CURLE_COULDNT_CONNECT &&
		(t->socket_errno == EMFILE || t->socket_errno == ENFILE))
	{
		/* not the backend's fault: the caller must not be told it is unreachable */
		resp->transport_error = "the mesh worker has no descriptor left for a connection (its open-files limit)";
		resp->out_of_descriptors = true;
		return;
	}
	if (t->result == CURLE_COULDNT_CONNECT && t->unix_socket)
	{
		resp->transport_error = psprintf("could not connect to unix socket %s", t->unix_socket);
		return;
	}
	if (t->result != CURLE_OK)
	{
		resp->transport_error = pstrdup(t->errbuf[0] ? t->errbuf : curl_easy_strerror(t->result));
		return;
	}
	resp->status = t->status;
	resp->body = t->body ? t->body : "";
	resp->body_len = t->body_len;
}

void
mesh_http_free(MeshTransfer *t)
{
	mesh_http_abort(t);
	curl_easy_cleanup(t->easy);
	curl_slist_free_all(t->headers);
	free(t->body);
	free(t->unix_socket);
	free(t);
}

/*
 * Move a transfer's deadline BY_MS later while it runs (an exec whose
 * command's timeout was extended: its answer comes that much later).
 * libcurl reads the timeout option each time it checks a transfer's time
 * left, so the new one holds from the next check on.  False when curl
 * refused the option (the old deadline stays).
 */
bool
mesh_http_extend(MeshTransfer *t, long by_ms)
{
	CURLcode	rc;

	if (t == NULL || t->easy == NULL || t->done)
		return true;
	rc = curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, t->timeout_ms + by_ms);
	if (rc != CURLE_OK)
		return false;
	t->timeout_ms += by_ms;
	return true;
}
