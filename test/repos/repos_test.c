/*
 * repos_test.c - tests of the repository providers' protocol pieces (src/repos/: the GitHub
 * App JWT signed with libcrypto, the mint request, the reader of the answer), as TAP: first
 * on their own, then against the GitHub API double (test/repos/github_double.py), which
 * verifies the JWT with the App's public key and enforces repository/permission scoping and
 * revocation; and GitLab's project access token pieces (src/repos/gitlab.c: the paths, the
 * body from a grant's permissions, the reader of the answer) on their own.  Built and run by
 * test/e2e/repo_tokens.t: cc -I src ... -lcrypto -ljansson -lcurl
 *
 * Usage: repos_test DOUBLE_URL APP_ID KEY_PEM OTHER_KEY_PEM INSTALLATION_ID
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "repos/repos.h"

static int n;
static int failed;

/* One TAP line. */
static void
ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

static char *
slurp(const char *path)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf = calloc(1, 65536);

	if (f == NULL || buf == NULL)
	{
		fprintf(stderr, "cannot read %s\n", path);
		exit(2);
	}
	if (fread(buf, 1, 65535, f) == 0)
		exit(2);
	fclose(f);
	return buf;
}

typedef struct Reply
{
	char		body[65536];
	size_t		len;
} Reply;

static size_t
collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Reply	   *r = userdata;
	size_t		k = size * nmemb;

	if (r->len + k >= sizeof(r->body))
		k = sizeof(r->body) - 1 - r->len;
	memcpy(r->body + r->len, ptr, k);
	r->len += k;
	r->body[r->len] = '\0';
	return size * nmemb;
}

/* One HTTP call to the double; the HTTP status. Credentials only in the Authorization header. */
static long
call(const char *method, const char *url, const char *auth, const char *body, Reply *r)
{
	CURL	   *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char		header[4096];
	long		status = 0;

	r->len = 0;
	r->body[0] = '\0';
	snprintf(header, sizeof(header), "Authorization: %s", auth);
	h = curl_slist_append(h, header);
	h = curl_slist_append(h, "Accept: application/vnd.github+json");
	h = curl_slist_append(h, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return status;
}

#define PARSE(lit, out, err) mesh_github_token_parse((lit), sizeof(lit) - 1, (out), (err))
#define GL_PARSE(lit, out, err) mesh_gitlab_token_parse((lit), sizeof(lit) - 1, (out), (err))

/* GitLab's pieces on their own: 15 cases. */
static void
gitlab_cases(void)
{
	char		err[MESH_REPOS_ERR_LEN];
	char	   *s;
	MeshRepoToken tok;
	time_t		now = 1765000000;	/* 2025-12-06T05:46:40Z */

	s = mesh_gitlab_token_path("octo/widgets", NULL);
	ok(s != NULL && strcmp(s, "/projects/octo%2Fwidgets/access_tokens") == 0,
	   "the GitLab create path names the project by its URL-encoded path");
	free(s);
	s = mesh_gitlab_token_path("octo/widgets", "42");
	ok(s != NULL && strcmp(s, "/projects/octo%2Fwidgets/access_tokens/42") == 0, "the revoke path adds the token id");
	free(s);
	ok(mesh_gitlab_token_path("octo/widgets", "4/../2") == NULL && mesh_gitlab_token_path("octo/a/b", NULL) == NULL &&
	   mesh_gitlab_token_path("octo/w?x", NULL) == NULL, "a token id that is not digits, or a project path not owner/name, cannot alter the path");
	s = mesh_gitlab_token_body("run-1", "{\"contents\":\"read\"}", now, err);
	ok(s != NULL && strcmp(s, "{\"access_level\":20,\"expires_at\":\"2025-12-07\",\"name\":\"mesh_exec run run-1\",\"scopes\":[\"read_repository\"]}") == 0,
	   "contents read: read_repository as Reporter, expiring at the start of the day after the coming hour's");
	free(s);
	s = mesh_gitlab_token_body("run-1", "{\"contents\":\"write\"}", now, err);
	ok(s != NULL && strstr(s, "\"scopes\":[\"read_repository\",\"write_repository\"]") != NULL &&
	   strstr(s, "\"access_level\":30") != NULL && strstr(s, "api") == NULL, "contents write: read and write_repository as Developer, no api");
	free(s);
	s = mesh_gitlab_token_body("run-1", "{\"contents\":\"read\",\"merge_requests\":\"write\"}", now, err);
	ok(s != NULL && strstr(s, "\"api\"") != NULL && strstr(s, "\"access_level\":30") != NULL,
	   "merge_requests: the api scope, only when asked");
	free(s);
	s = mesh_gitlab_token_body("run-1", "{\"contents\":\"read\"}", 1765063800, err);	/* 23:30 UTC */
	ok(s != NULL && strstr(s, "\"expires_at\":\"2025-12-08\"") != NULL,
	   "past 23:00 UTC the expiry date moves on a day (never before the row's hour)");
	free(s);
	ok(mesh_gitlab_token_body("run-1", "{\"pull_requests\":\"read\"}", now, err) == NULL &&
	   strstr(err, "contents and merge_requests") != NULL, "a permission GitLab tokens cannot carry is refused, saying which they can");
	ok(mesh_gitlab_token_body("run-1", "{\"contents\":\"admin\"}", now, err) == NULL &&
	   mesh_gitlab_token_body("run-1", "{}", now, err) == NULL, "levels other than read/write, and an empty set, are refused");
	ok(GL_PARSE("{\"id\":42,\"token\":\"glpat-x\",\"expires_at\":\"2025-12-07\",\"scopes\":[\"read_repository\"],\"access_level\":20}", &tok, err) == 0 &&
	   strcmp(tok.token, "glpat-x") == 0 && strcmp(tok.provider_token_id, "42") == 0 && tok.expires_at == 1765065600 &&
	   strcmp(tok.permissions_json, "{\"access_level\":20,\"scopes\":[\"read_repository\"]}") == 0,
	   "GitLab's answer: the token, its id, the start of its expiry day and what it carries are read");
	mesh_repo_token_clear(&tok);
	ok(GL_PARSE("{\"token\":\"glpat-x\",\"expires_at\":\"2025-12-07\"}", &tok, err) != 0 &&
	   GL_PARSE("{\"id\":\"42\",\"token\":\"glpat-x\",\"expires_at\":\"2025-12-07\"}", &tok, err) != 0 &&
	   GL_PARSE("{\"id\":-1,\"token\":\"glpat-x\",\"expires_at\":\"2025-12-07\"}", &tok, err) != 0,
	   "an answer without a positive integer id is refused (the token could not be revoked)");
	ok(GL_PARSE("{\"id\":42,\"expires_at\":\"2025-12-07\"}", &tok, err) != 0 &&
	   GL_PARSE("{\"id\":42,\"token\":\"gl pat\",\"expires_at\":\"2025-12-07\"}", &tok, err) != 0,
	   "an answer without a usable token is refused");
	ok(GL_PARSE("{\"id\":42,\"token\":\"glpat-x\",\"expires_at\":\"2025-12-07T00:00:00Z\"}", &tok, err) != 0 &&
	   GL_PARSE("{\"id\":42,\"token\":\"glpat-x\",\"expires_at\":null}", &tok, err) != 0 &&
	   GL_PARSE("{\"id\":42,\"token\":\"glpat-x\",\"expires_at\":\"2025-13-07\"}", &tok, err) != 0,
	   "an expiry that is not a date is refused (GitLab's expiry is a day)");
	ok(GL_PARSE("[1]", &tok, err) != 0 && GL_PARSE("{\"message\":\"401 Unauthorized\"}", &tok, err) != 0,
	   "an answer that is not a token object is refused");
	ok(GL_PARSE("{\"id\":42,\"token\":\"glpat-secret\",\"expires_at\":\"x\"}", &tok, err) != 0 && strstr(err, "glpat") == NULL &&
	   tok.token == NULL, "a refused answer leaves no token behind and the error does not repeat it");
}

/* Mint through the double: JWT signed with KEY at NOW for REPOSITORY and PERMS. */
static long
mint(const char *base, const char *app_id, const char *key, time_t now, const char *installation,
	 const char *repository, const char *perms, Reply *r)
{
	char		err[MESH_REPOS_ERR_LEN],
				url[512],
				auth[4096];
	char	   *jwt = mesh_github_app_jwt(app_id, key, now, err);
	char	   *path = mesh_github_token_path(installation);
	char	   *body = mesh_github_token_body(repository, perms, err);
	long		status;

	if (jwt == NULL || path == NULL || body == NULL)
		return -1;
	snprintf(url, sizeof(url), "%s%s", base, path);
	snprintf(auth, sizeof(auth), "Bearer %s", jwt);
	status = call("POST", url, auth, body, r);
	free(jwt);
	free(path);
	free(body);
	return status;
}

static long
check(const char *base, const char *token, const char *repository, const char *access)
{
	char		url[512],
				auth[2048],
				body[512];
	Reply		r;

	snprintf(url, sizeof(url), "%s/_double/check", base);
	snprintf(auth, sizeof(auth), "token %s", token);
	snprintf(body, sizeof(body), "{\"repository\":\"%s\",\"access\":\"%s\"}", repository, access);
	return call("POST", url, auth, body, &r);
}

int
main(int argc, char **argv)
{
	const char *base,
			   *app_id,
			   *installation;
	char	   *key,
			   *other_key,
			   *jwt,
			   *body,
			   *dot1,
			   *dot2;
	char		err[MESH_REPOS_ERR_LEN],
				url[512],
				auth[2048];
	MeshRepoToken tok,
				tok2;
	Reply		r;
	time_t		now = time(NULL),
				t;

	if (argc != 6)
	{
		fprintf(stderr, "usage: repos_test DOUBLE_URL APP_ID KEY_PEM OTHER_KEY_PEM INSTALLATION\n");
		return 2;
	}
	base = argv[1];
	app_id = argv[2];
	key = slurp(argv[3]);
	other_key = slurp(argv[4]);
	installation = argv[5];
	curl_global_init(CURL_GLOBAL_DEFAULT);
	printf("1..50\n");

	/* The JWT on its own */
	jwt = mesh_github_app_jwt(app_id, key, now, err);
	ok(jwt != NULL && (dot1 = strchr(jwt, '.')) != NULL && (dot2 = strchr(dot1 + 1, '.')) != NULL &&
	   strchr(dot2 + 1, '.') == NULL, "the App JWT has three parts");
	ok(jwt != NULL && strncmp(jwt, "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.", 37) == 0,
	   "its header is {\"alg\":\"RS256\",\"typ\":\"JWT\"}");
	ok(jwt != NULL && strpbrk(jwt, "+/=") == NULL, "it is base64url without padding");
	free(jwt);
	ok(mesh_github_app_jwt("12a", key, now, err) == NULL && strstr(err, "digits") != NULL,
	   "an App id that is not digits is refused (it goes into the claims)");
	ok(mesh_github_app_jwt(app_id, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
						   now, err) == NULL && strstr(err, "RSA key") != NULL,
	   "a key that is not an RSA PEM is refused");
	ok(strstr(err, "AAAA") == NULL, "the error does not repeat the key");

	/* The request */
	body = mesh_github_token_body("octo/widgets", "{\"contents\":\"read\"}", err);
	ok(body != NULL && strcmp(body, "{\"permissions\":{\"contents\":\"read\"},\"repositories\":[\"widgets\"]}") == 0,
	   "the mint body names exactly the repository (without its owner) and the permissions");
	free(body);
	ok(mesh_github_token_body("widgets", "{\"contents\":\"read\"}", err) == NULL, "a repository without an owner is refused");
	ok(mesh_github_token_body("octo/a/b", "{\"contents\":\"read\"}", err) == NULL, "a repository with two slashes is refused");
	ok(mesh_github_token_body("octo/..", "{\"contents\":\"read\"}", err) == NULL, "a repository named .. is refused");
	ok(mesh_github_token_body("octo/w\"x", "{\"contents\":\"read\"}", err) == NULL, "a repository with a quote is refused");
	ok(mesh_github_token_body("octo/w", "{\"contents\":\"admin\"}", err) == NULL, "a permission level other than read/write is refused");
	ok(mesh_github_token_body("octo/w", "{}", err) == NULL, "an empty permission set is refused");
	ok(mesh_github_token_body("octo/w", "[\"contents\"]", err) == NULL, "permissions that are not an object are refused");
	ok(mesh_github_token_path("12/../x") == NULL, "an installation id that is not digits cannot alter the path");

	gitlab_cases();

	/* The answer */
	ok(PARSE("{\"token\":\"ghs_x\",\"expires_at\":\"2016-07-11T22:14:10Z\",\"permissions\":{\"contents\":\"read\"}}", &tok, err) == 0 && strcmp(tok.token, "ghs_x") == 0 && tok.expires_at == 1468275250,
	   "an answer's token and expiry are read");
	mesh_repo_token_clear(&tok);
	ok(PARSE("{\"expires_at\":\"2016-07-11T22:14:10Z\"}", &tok, err) != 0, "an answer without a token is refused");
	ok(PARSE("{\"token\":\"ghs_x\",\"expires_at\":\"2016-07-11 22:14\"}", &tok, err) != 0, "an expiry that is not ISO 8601 UTC is refused");
	ok(PARSE("not json", &tok, err) != 0, "an answer that is not JSON is refused");

	/* Against the GitHub API double */
	ok(mint(base, app_id, key, now, installation, "octo/widgets", "{\"contents\":\"write\"}", &r) == 201 &&
	   mesh_github_token_parse(r.body, r.len, &tok, err) == 0,
	   "the double accepts the JWT and mints a token for the repository");
	t = tok.expires_at;
	ok(t > now && t <= now + MESH_REPO_TOKEN_MAX_LIFETIME + 5, "the token expires within an hour");
	ok(check(base, tok.token, "octo/widgets", "write") == 200, "the token may write its repository");
	ok(check(base, tok.token, "octo/gadgets", "read") == 403, "the token may not read another repository of the installation");
	ok(mint(base, app_id, other_key, now, installation, "octo/widgets", "{\"contents\":\"read\"}", &r) == 401,
	   "a JWT signed with another key is refused");
	ok(mint(base, app_id, key, now - 700, installation, "octo/widgets", "{\"contents\":\"read\"}", &r) == 401,
	   "an expired JWT (signed 700 s ago) is refused");
	ok(mint(base, "999", key, now, installation, "octo/widgets", "{\"contents\":\"read\"}", &r) == 401,
	   "a JWT for another App id is refused");
	ok(mint(base, app_id, key, now, installation, "octo/secret-repo", "{\"contents\":\"read\"}", &r) == 422,
	   "a repository outside the installation is refused");
	ok(mint(base, app_id, key, now, installation, "octo/widgets", "{\"contents\":\"read\"}", &r) == 201 &&
	   mesh_github_token_parse(r.body, r.len, &tok2, err) == 0 && strcmp(tok.token, tok2.token) != 0,
	   "a read-only token for the same repository is a different token");
	ok(check(base, tok2.token, "octo/widgets", "write") == 403 && check(base, tok2.token, "octo/widgets", "read") == 200,
	   "a read-only token reads but may not write");

	/* Revocation */
	snprintf(url, sizeof(url), "%s/installation/token", base);
	snprintf(auth, sizeof(auth), "Bearer %s", tok.token);
	ok(call("DELETE", url, auth, NULL, &r) == 204, "revoking the token answers 204");
	ok(check(base, tok.token, "octo/widgets", "read") == 401, "a revoked token is refused");
	ok(call("DELETE", url, auth, NULL, &r) == 401, "a revoked token cannot be revoked twice");
	ok(check(base, tok2.token, "octo/widgets", "read") == 200, "revoking one token leaves the other (control)");
	/* Expiry: the double mints tokens that are already past their expires_at */
	snprintf(url, sizeof(url), "%s/_double/lifetime", base);
	call("POST", url, "none", "{\"seconds\": -1}", &r);
	mesh_repo_token_clear(&tok);
	ok(mint(base, app_id, key, now, installation, "octo/widgets", "{\"contents\":\"read\"}", &r) == 201 &&
	   mesh_github_token_parse(r.body, r.len, &tok, err) == 0 && tok.expires_at < time(NULL),
	   "the double mints a token already past its expiry (control of the next case)");
	ok(check(base, tok.token, "octo/widgets", "read") == 401, "an expired token is refused");
	mesh_repo_token_clear(&tok);
	mesh_repo_token_clear(&tok2);
	free(key);
	free(other_key);
	curl_global_cleanup();
	return failed ? 1 : 0;
}
