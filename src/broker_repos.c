/*-------------------------------------------------------------------------
 *
 * broker_repos.c
 *	  The broker's repository tokens: minted for one run, one repository and
 *	  the grant's permissions at first use, handed to the sandbox's git
 *	  credential helper, revoked at the provider when the run ends or the
 *	  provider's key is rotated.
 *
 *	  POST /v1/repositories/{host}/{owner}/{name}/token
 *	       Authorization: Bearer <run token>
 *	  200 {"username": "x-access-token" (GitHub) or "oauth2" (GitLab), "password": <token>}
 *	  403 {"error": {"code": "refused", "message": <why>}}
 *	  502 {"error": {"code": "mint_failed", "message": <why>}}
 *
 * mesh.broker_repository_token decides (run token, grant, host) and
 * records the fetch as an event; when no live token has five minutes left
 * this worker mints one (src/repos/: the GitHub App's JWT and the
 * installation token request, or GitLab's project access token request
 * with the install token) and records it with
 * mesh.repository_token_minted.  The provider call is a blocking libcurl
 * call bounded by MINT_TIMEOUT_S: the broker serves nobody else meanwhile
 * (a known limit of this first version).  The provider's credential and
 * the token travel in request headers and bodies only, are wiped after use
 * and never appear in a log line or an error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <curl/curl.h>
#include <time.h>

#include "credentials.h"
#include "txn.h"
#include "worker_http.h"

#include "broker_repos.h"
#include "repos/repos.h"

#define MINT_TIMEOUT_S 10
#define MAX_ANSWER 65536
#define REVOKE_BATCH 16

static const char decide_sql[] =
"SELECT granted, reason, token, run_id, permissions::text AS permissions, provider_kind, api_url, "
"       app_id, installation_id, credential, key_version::text AS key_version "
"  FROM mesh.broker_repository_token(pg_catalog.decode($1, 'hex'), $2, $3, $4)";

static const char minted_sql[] =
"SELECT mesh.repository_token_minted($1, $2, $3, pg_catalog.to_timestamp($4::float8), $5::jsonb, $6::integer, $7)";

static const char pending_sql[] =
"SELECT id, provider_kind, api_url, repository, provider_token_id, credential, token "
"  FROM mesh.repository_tokens_to_revoke(" CppAsString2(REVOKE_BATCH) ")";

static const char revoked_sql[] = "SELECT mesh.repository_token_revoked($1::bigint, $2)";

typedef struct Collected
{
	char	   *data;
	size_t		len;
} Collected;

static size_t
collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Collected  *c = userdata;
	size_t		k = size * nmemb;

	if (c->len + k > MAX_ANSWER)
		return 0;				/* an answer this large is not a token's */
	memcpy(c->data + c->len, ptr, k);
	c->len += k;
	c->data[c->len] = '\0';
	return k;
}

/* Wipe and free a malloc'd or palloc'd secret string. */
static void
wipe(char *s, bool palloced)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	if (palloced)
		pfree(s);
	else
		free(s);
}

/* Is the provider of this kind GitLab (else GitHub)? */
static bool
is_gitlab(const char *provider_kind)
{
	return strcmp(provider_kind, "gitlab") == 0;
}

/*
 * One call to a provider of PROVIDER_KIND: METHOD URL with BODY, SECRET in
 * the provider's header ("Authorization: Bearer" for GitHub, "PRIVATE-TOKEN"
 * for GitLab); the HTTP status (0 when no answer came) and the answer in OUT.
 */
static long
provider_call(const char *provider_kind, const char *method, const char *url, const char *secret,
			  const char *body, Collected *out)
{
	CURL	   *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char	   *header;
	long		status = 0;
	CURLcode	rc = CURLE_OK;

	out->len = 0;
	out->data[0] = '\0';
	if (c == NULL)
		return 0;
	if (is_gitlab(provider_kind))
	{
		header = psprintf("PRIVATE-TOKEN: %s", secret);
		h = curl_slist_append(h, header);
		h = curl_slist_append(h, "Accept: application/json");
	}
	else
	{
		header = psprintf("Authorization: Bearer %s", secret);
		h = curl_slist_append(h, header);
		h = curl_slist_append(h, "Accept: application/vnd.github+json");
		h = curl_slist_append(h, "X-GitHub-Api-Version: 2022-11-28");
	}
	h = curl_slist_append(h, "User-Agent: mesh_exec");
	h = curl_slist_append(h, "Content-Type: application/json");
	MESH_CURL_SETOPT(rc, c, CURLOPT_URL, url);
	MESH_CURL_SETOPT(rc, c, CURLOPT_CUSTOMREQUEST, method);
	MESH_CURL_SETOPT(rc, c, CURLOPT_HTTPHEADER, h);
	MESH_CURL_SETOPT(rc, c, CURLOPT_TIMEOUT, (long) MINT_TIMEOUT_S);
	MESH_CURL_SETOPT(rc, c, CURLOPT_NOSIGNAL, 1L);
	MESH_CURL_SETOPT(rc, c, CURLOPT_PROTOCOLS_STR, "http,https");
	/* never follow redirects: a credential or a token must not travel elsewhere */
	MESH_CURL_SETOPT(rc, c, CURLOPT_FOLLOWLOCATION, 0L);
	if (body != NULL)
		MESH_CURL_SETOPT(rc, c, CURLOPT_POSTFIELDS, body);
	MESH_CURL_SETOPT(rc, c, CURLOPT_WRITEFUNCTION, collect);
	MESH_CURL_SETOPT(rc, c, CURLOPT_WRITEDATA, out);
	/* status stays 0 (no answer) when an option, the transfer or the getinfo failed */
	if (rc == CURLE_OK && curl_easy_perform(c) == CURLE_OK &&
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
		status = 0;
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	wipe(header, true);
	return status;
}

static json_t *
refusal(const char *code, const char *message)
{
	return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
}

/*
 * POST the mint request BODY to URL with SECRET and read the provider's
 * 201 answer into TOK; 0, or an error in ERR (never the secret or a token).
 */
static int
mint_call(const char *provider_kind, const char *url, const char *secret, const char *body,
		  MeshRepoToken *tok, char *err)
{
	Collected	answer;
	long		status;
	int			rc = -1;

	answer.data = palloc(MAX_ANSWER + 1);
	status = provider_call(provider_kind, "POST", url, secret, body, &answer);
	if (status == 201)
		rc = is_gitlab(provider_kind) ? mesh_gitlab_token_parse(answer.data, answer.len, tok, err)
			: mesh_github_token_parse(answer.data, answer.len, tok, err);
	else
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider answered HTTP %ld to the mint", status);
	explicit_bzero(answer.data, answer.len);
	pfree(answer.data);
	return rc;
}

/* Mint for REPOSITORY at the GitHub App installation; 0 and TOK filled, or an error in ERR. */
static int
mint_github(const char *api_url, const char *app_id, const char *installation_id, const char *key,
			const char *repository, const char *permissions, MeshRepoToken *tok, char *err)
{
	char	   *jwt = mesh_github_app_jwt(app_id, key, time(NULL), err);
	char	   *path = mesh_github_token_path(installation_id);
	char	   *body = NULL;
	int			rc = -1;

	if (jwt == NULL)
		return -1;
	body = mesh_github_token_body(repository, permissions, err);
	if (path == NULL || body == NULL)
	{
		if (path == NULL)
			snprintf(err, MESH_REPOS_ERR_LEN, "the installation id is not valid");
		goto done;
	}
	rc = mint_call("github", psprintf("%s%s", api_url, path), jwt, body, tok, err);
done:
	wipe(jwt, false);
	free(path);
	free(body);
	return rc;
}

/* Mint a project access token for REPOSITORY at GitLab with the install token; 0 and TOK, or ERR. */
static int
mint_gitlab(const char *api_url, const char *install_token, const char *repository,
			const char *run_id, const char *permissions, MeshRepoToken *tok, char *err)
{
	char	   *path = mesh_gitlab_token_path(repository, NULL);
	char	   *body = mesh_gitlab_token_body(run_id, permissions, time(NULL), err);
	int			rc = -1;

	if (path == NULL && body != NULL)
		snprintf(err, MESH_REPOS_ERR_LEN, "a repository is named owner/name");
	if (path != NULL && body != NULL)
		rc = mint_call("gitlab", psprintf("%s%s", api_url, path), install_token, body, tok, err);
	free(path);
	free(body);
	return rc;
}

/* The user name git gives with a provider's token. */
static const char *
git_username(const char *provider_kind)
{
	return is_gitlab(provider_kind) ? "oauth2" : "x-access-token";
}

/*
 * Answer a sandbox's request for a repository token: the HTTP status, and
 * the JSON answer in ANSWER.  URL is past the broker's routing (it starts
 * with MESH_BROKER_REPOS_PREFIX).
 */
unsigned int
mesh_broker_repository_token(const char *url, const char *token, const char *ref, json_t **answer)
{
	const char *rest = url + strlen(MESH_BROKER_REPOS_PREFIX);
	const char *slash = strchr(rest, '/');
	size_t		len = strlen(rest);
	char	   *host,
			   *repository;
	MeshParam	p[4];
	MeshRows   *rows;
	ErrorData  *edata = NULL;
	char		err[MESH_REPOS_ERR_LEN];
	MeshRepoToken tok;
	char	   *value;
	char	   *credential,
			   *provider_kind,
			   *run_id,
			   *permissions,
			   *key_version;
	int			rc;

	if (slash == NULL || len < strlen("/token") || strcmp(rest + len - strlen("/token"), "/token") != 0 ||
		slash == rest)
	{
		*answer = refusal("not_found", "use POST /v1/repositories/{host}/{owner}/{name}/token");
		return 404;
	}
	host = pnstrdup(rest, slash - rest);
	repository = pnstrdup(slash + 1, (rest + len - strlen("/token")) - (slash + 1));
	if (!mesh_repo_name_valid(repository))
	{
		*answer = refusal("not_found", "a repository is named {owner}/{name}");
		return 404;
	}
	p[0] = mesh_text_param(mesh_token_hash_hex(token));
	p[1] = mesh_text_param(host);
	p[2] = mesh_text_param(repository);
	p[3] = mesh_text_param(ref);
	if (!mesh_txn_sql("mesh broker: repository token", MESH_COMMIT_DURABLE, decide_sql, 4, p, &rows, &edata) ||
		rows->n != 1)
	{
		if (edata != NULL)
		{
			ereport(LOG, (errmsg("mesh broker: %s", edata->message)));
			FreeErrorData(edata);
		}
		*answer = refusal("internal", "internal error; see the server log");
		return 500;
	}
	if (!mesh_col_bool(rows, 0, "granted"))
	{
		*answer = refusal("refused", mesh_col_text(rows, 0, "reason"));
		return 403;
	}
	if (!mesh_col_isnull(rows, 0, "token"))
	{
		value = mesh_col_text(rows, 0, "token");
		*answer = json_pack("{s:s,s:s}", "username", git_username(mesh_col_text(rows, 0, "provider_kind")),
							"password", value);
		wipe(value, true);
		explicit_bzero(rows->rows[0]->t_data, rows->rows[0]->t_len);
		return 200;
	}
	provider_kind = mesh_col_text(rows, 0, "provider_kind");
	run_id = mesh_col_text(rows, 0, "run_id");
	permissions = mesh_col_text(rows, 0, "permissions");
	key_version = mesh_col_text(rows, 0, "key_version");
	credential = mesh_col_text(rows, 0, "credential");
	if (is_gitlab(provider_kind))
		rc = mint_gitlab(mesh_col_text(rows, 0, "api_url"), credential, repository, run_id,
						 permissions, &tok, err);
	else
		rc = mint_github(mesh_col_text(rows, 0, "api_url"), mesh_col_text(rows, 0, "app_id"),
						 mesh_col_text(rows, 0, "installation_id"), credential, repository,
						 permissions, &tok, err);
	wipe(credential, true);
	explicit_bzero(rows->rows[0]->t_data, rows->rows[0]->t_len);
	if (rc != 0)
	{
		ereport(LOG, (errmsg("mesh broker: minting a token for %s failed: %s", repository, err)));
		*answer = refusal("mint_failed", err);
		return 502;
	}
	{
		MeshParam	m[7] = {
			mesh_text_param(run_id), mesh_text_param(repository), mesh_text_param(tok.token),
			mesh_text_param(psprintf("%lld", (long long) tok.expires_at)),
			mesh_text_param(permissions), mesh_text_param(key_version),
		mesh_text_param(tok.provider_token_id)};
		MeshRows   *r2;

		if (!mesh_txn_sql("mesh broker: token minted", MESH_COMMIT_DURABLE, minted_sql, 7, m, &r2, &edata))
		{
			ereport(LOG, (errmsg("mesh broker: recording a minted token failed: %s", edata->message)));
			FreeErrorData(edata);
			mesh_repo_token_clear(&tok);
			*answer = refusal("internal", "internal error; see the server log");
			return 500;
		}
	}
	*answer = json_pack("{s:s,s:s}", "username", git_username(provider_kind), "password", tok.token);
	mesh_repo_token_clear(&tok);
	return 200;
}

/*
 * Ask the provider to revoke row I of the round: GitHub with the token
 * itself (DELETE /installation/token), GitLab with the install token and
 * the token's id (DELETE /projects/{path}/access_tokens/{id}).  The outcome.
 */
static const char *
revoke_one(MeshRows *rows, uint64 i, Collected *answer)
{
	const char *kind = mesh_col_text(rows, i, "provider_kind");
	const char *api_url = mesh_col_text(rows, i, "api_url");
	char	   *secret;
	char	   *path = NULL;
	long		status;

	if (!is_gitlab(kind))
	{
		secret = mesh_col_text(rows, i, "token");
		status = provider_call(kind, "DELETE", psprintf("%s/installation/token", api_url), secret, NULL, answer);
		wipe(secret, true);
		return status == 204 ? "revoked" : status == 401 ? "already invalid" : "failed";
	}
	if (!mesh_col_isnull(rows, i, "provider_token_id") && !mesh_col_isnull(rows, i, "credential"))
		path = mesh_gitlab_token_path(mesh_col_text(rows, i, "repository"),
									  mesh_col_text(rows, i, "provider_token_id"));
	if (path == NULL)
		return "failed";
	secret = mesh_col_text(rows, i, "credential");
	status = provider_call(kind, "DELETE", psprintf("%s%s", api_url, path), secret, NULL, answer);
	wipe(secret, true);
	free(path);
	/* 404: GitLab knows no live token of that id in the project (revoked or expired already) */
	return status == 204 ? "revoked" : status == 404 ? "already invalid" : "failed";
}

/*
 * Revoke at their provider the tokens whose run ended or whose key was
 * rotated (revoke_outcome 'pending'), and record each answer.
 */
void
mesh_broker_revoke_pending(void)
{
	MeshRows   *rows;
	ErrorData  *edata = NULL;
	Collected	answer;

	if (!mesh_txn_sql("mesh broker: tokens to revoke", MESH_COMMIT_DEFERRED, pending_sql, 0, NULL, &rows, &edata))
	{
		ereport(LOG, (errmsg("mesh broker: %s", edata->message)));
		FreeErrorData(edata);
		return;
	}
	answer.data = palloc(MAX_ANSWER + 1);
	for (uint64 i = 0; i < rows->n; i++)
	{
		const char *outcome = mesh_col_isnull(rows, i, "token") ? "already invalid"
			: revoke_one(rows, i, &answer);
		MeshParam	p[2];
		MeshRows   *r2;

		p[0] = mesh_text_param(psprintf("%lld", (long long) mesh_col_int64(rows, i, "id")));
		p[1] = mesh_text_param(outcome);
		if (!mesh_txn_sql("mesh broker: token revoked", MESH_COMMIT_DURABLE, revoked_sql, 2, p, &r2, &edata))
		{
			ereport(LOG, (errmsg("mesh broker: %s", edata->message)));
			FreeErrorData(edata);
		}
	}
	for (uint64 i = 0; i < rows->n; i++)
		explicit_bzero(rows->rows[i]->t_data, rows->rows[i]->t_len);
}
