/*-------------------------------------------------------------------------
 *
 * worker_http.c
 *	  libcurl multi inside a background worker.
 *
 * curl tells us which sockets it waits on (CURLMOPT_SOCKETFUNCTION); each
 * turn of the worker loop builds a WaitEventSet from them plus the latch,
 * so a worker sleeps until either a socket is ready or a caller wakes it:
 * no polling.  Connections are reused across calls by the multi handle's
 * connection cache.
 *
 * Callbacks that curl invokes only touch malloc'd memory: an ereport
 * longjmp through libcurl would corrupt it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <curl/curl.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "worker_http.h"

struct MeshTransfer
{
	CURL	   *easy;
	struct curl_slist *headers;
	void	   *owner;
	char	   *body;			/* malloc'd response body */
	size_t		body_len;
	size_t		body_cap;
	size_t		max_response;
	bool		overflow;
	bool		done;
	CURLcode	result;
	long		status;
	char		errbuf[CURL_ERROR_SIZE];
	char	   *unix_socket;	/* malloc'd copy, for error messages */
};

static CURLM *multi = NULL;
static int	nrunning = 0;

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

void
mesh_http_init(void)
{
	multi = curl_multi_init();
	if (multi == NULL)
		elog(ERROR, "mesh: could not initialise libcurl");
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 64L);
}

/* Start a transfer; it progresses in mesh_http_drive(). */
MeshTransfer *
mesh_http_start(const MeshHttpRequest *req, size_t max_response, void *owner)
{
	MeshTransfer *t = calloc(1, sizeof(MeshTransfer));
	CURL	   *easy;

	if (t == NULL || (easy = curl_easy_init()) == NULL)
		elog(ERROR, "mesh: out of memory starting an HTTP request");
	t->easy = easy;
	t->owner = owner;
	t->max_response = max_response;
	for (int i = 0; i < req->nheaders; i++)
		t->headers = curl_slist_append(t->headers, req->headers[i]);
	/* no "Expect: 100-continue" round trip on uploads */
	t->headers = curl_slist_append(t->headers, "Expect:");

	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	if (req->unix_socket)
	{
		curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, req->unix_socket);
		t->unix_socket = strdup(req->unix_socket);
	}
	if (req->ca_pem)
	{
		struct curl_blob ca = {(void *) req->ca_pem, strlen(req->ca_pem), CURL_BLOB_COPY};

		curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &ca);
	}
	curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
	if (strcmp(req->method, "GET") == 0)
		curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
	else
	{
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
	}
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->headers);
	/* a body announced over the limit is refused before any of it is read */
	curl_easy_setopt(easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) max_response);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_callback);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->errbuf);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, t);
	/* never follow redirects: a credential must not travel elsewhere */
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_multi_add_handle(multi, easy);
	nrunning++;
	return t;
}

/* Stop a transfer now; the socket closes and the peer sees the disconnect. */
void
mesh_http_abort(MeshTransfer *t)
{
	if (!t->done)
	{
		curl_multi_remove_handle(multi, t->easy);
		nrunning--;
		t->done = true;
		t->result = CURLE_ABORTED_BY_CALLBACK;
	}
}

/*
 * Let curl do whatever work is ready; completed transfers are marked done.
 * Returns how many completed in this call.
 */
int
mesh_http_drive(void)
{
	int			still;
	CURLMsg    *msg;
	int			left;
	int			completed = 0;

	curl_multi_perform(multi, &still);
	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		MeshTransfer *t;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
		t->result = msg->data.result;
		curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
		curl_multi_remove_handle(multi, t->easy);
		nrunning--;
		t->done = true;
		completed++;
	}
	return completed;
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
	if (t->overflow || t->result == CURLE_FILESIZE_EXCEEDED)
	{
		resp->transport_error = "response larger than the configured limit";
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
 * A wait set over the latch, postmaster death and curl's sockets.  Built per
 * loop turn because the socket set changes as transfers come and go; the
 * descriptors come from curl_multi_fdset, which this libcurl has (it lacks
 * curl_multi_waitfds).
 */
WaitEventSet *
mesh_http_wait_set(long *timeout_ms)
{
	fd_set		readable;
	fd_set		writable;
	fd_set		failed;
	int			maxfd = -1;
	int			count = 0;
	WaitEventSet *set;

	FD_ZERO(&readable);
	FD_ZERO(&writable);
	FD_ZERO(&failed);
	if (nrunning > 0)
		curl_multi_fdset(multi, &readable, &writable, &failed, &maxfd);
	for (int fd = 0; fd <= maxfd; fd++)
		if (FD_ISSET(fd, &readable) || FD_ISSET(fd, &writable))
			count++;

	set = CreateWaitEventSet(CurrentMemoryContext, count + 2);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int fd = 0; fd <= maxfd; fd++)
	{
		uint32		events = 0;

		if (FD_ISSET(fd, &readable))
			events |= WL_SOCKET_READABLE;
		if (FD_ISSET(fd, &writable))
			events |= WL_SOCKET_WRITEABLE;
		if (events)
			AddWaitEventToSet(set, events, fd, NULL, NULL);
	}
	*timeout_ms = -1;
	if (nrunning > 0)
	{
		curl_multi_timeout(multi, timeout_ms);
		/* curl has work but no socket to wait on yet (e.g. resolving): retry soon */
		if (maxfd < 0 && (*timeout_ms < 0 || *timeout_ms > 10))
			*timeout_ms = 10;
	}
	return set;
}

/*
 * One request, waited for here and now, at most timeout_ms.  For the few
 * moments when the loop cannot run: a worker's exit and its start-up.  The
 * response's body lives until the next call.
 */
void
mesh_http_blocking(const MeshHttpRequest *req, long timeout_ms, MeshHttpResponse *resp)
{
	static MeshTransfer *last = NULL;
	MeshHttpRequest bounded = *req;
	MeshTransfer *t;

	if (last)
		mesh_http_free(last);
	bounded.timeout_ms = Min(req->timeout_ms, timeout_ms);
	t = mesh_http_start(&bounded, 1024 * 1024, NULL);
	curl_multi_remove_handle(multi, t->easy);
	nrunning--;
	t->result = curl_easy_perform(t->easy);
	t->done = true;
	curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
	mesh_http_response(t, resp);
	last = t;
}
