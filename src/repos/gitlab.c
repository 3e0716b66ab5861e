/*-------------------------------------------------------------------------
 *
 * gitlab.c
 *	  GitLab's side of minting a repository token: the request that asks
 *	  for a project access token scoped to one project and the grant's
 *	  permissions, and the reader of GitLab's answer.
 *
 * REST reference: "Project access tokens API".  Create:
 * POST /projects/{id}/access_tokens (id: the URL-encoded project path)
 * with the install token in the PRIVATE-TOKEN header; body {"name",
 * "scopes", "access_level", "expires_at" (a date, YYYY-MM-DD)}; answer
 * 201 {"id", "token", "expires_at", "scopes", "access_level", ...}.
 * Revoke: DELETE /projects/{id}/access_tokens/{token_id}, same header,
 * 204.  git takes the token as the password of user "oauth2".
 *
 * What a grant's permissions become (GitLab has no narrower scope for
 * merge requests than "api"):
 *	  contents read         read_repository                    Reporter (20)
 *	  contents write        read_repository, write_repository  Developer (30)
 *	  merge_requests read   api                                Reporter (20)
 *	  merge_requests write  api                                Developer (30)
 * The access level is the highest any permission needs.  GitLab's expiry
 * is a day: the token is asked to expire at the start of the day after
 * the one an hour from now (so never before our row, which expires within
 * the hour and is revoked at release or by the expiry sweep).
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "repos/repos.h"

/*
 * The path of the create call for REPOSITORY ("owner/name", checked, its
 * slash encoded), or of the revoke call of TOKEN_ID (digits) when given.
 */
char *
mesh_gitlab_token_path(const char *repository, const char *token_id)
{
	const char *slash;
	char	   *path;

	if (!mesh_repo_name_valid(repository))
		return NULL;
	if (token_id != NULL && (*token_id == '\0' || strlen(token_id) > 20 ||
							 strspn(token_id, "0123456789") != strlen(token_id)))
		return NULL;
	slash = strchr(repository, '/');
	path = malloc(strlen(repository) + 64);
	if (path != NULL)
		sprintf(path, "/projects/%.*s%%2F%s/access_tokens%s%s", (int) (slash - repository), repository,
				slash + 1, token_id ? "/" : "", token_id ? token_id : "");
	return path;
}

/* Add SCOPE to the array SCOPES once. */
static void
scope_add(json_t *scopes, const char *scope)
{
	size_t		i;
	json_t	   *s;

	json_array_foreach(scopes, i, s)
		if (strcmp(json_string_value(s), scope) == 0)
		return;
	json_array_append_new(scopes, json_string(scope));
}

/*
 * The create request's body: a name saying which run it is for, the
 * scopes and access level of PERMISSIONS_JSON (table above) and the
 * expiry date.  NULL and ERR when a permission has no GitLab counterpart.
 */
char *
mesh_gitlab_token_body(const char *run_id, const char *permissions_json, time_t now, char *err)
{
	json_t	   *perms,
			   *scopes,
			   *body,
			   *level;
	const char *name;
	char		date[16],
				token_name[128];
	time_t		day = now + MESH_REPO_TOKEN_MAX_LIFETIME + 86400;
	struct tm	tm;
	int			access = MESH_GITLAB_REPORTER;
	char	   *text = NULL;

	err[0] = '\0';
	if (run_id == NULL || *run_id == '\0' || !mesh_github_permissions_valid(permissions_json))
	{
		snprintf(err, MESH_REPOS_ERR_LEN,
				 "permissions are a non-empty object of \"read\" or \"write\" levels");
		return NULL;
	}
	perms = json_loads(permissions_json, 0, NULL);
	scopes = json_array();
	json_object_foreach(perms, name, level)
	{
		int			write = strcmp(json_string_value(level), "write") == 0;

		if (strcmp(name, "contents") == 0)
		{
			scope_add(scopes, "read_repository");
			if (write)
				scope_add(scopes, "write_repository");
		}
		else if (strcmp(name, "merge_requests") == 0)
			scope_add(scopes, "api");
		else
		{
			snprintf(err, MESH_REPOS_ERR_LEN,
					 "a GitLab token carries the permissions contents and merge_requests only");
			break;
		}
		if (write)
			access = MESH_GITLAB_DEVELOPER;
	}
	if (err[0] == '\0')
	{
		gmtime_r(&day, &tm);
		strftime(date, sizeof(date), "%Y-%m-%d", &tm);
		snprintf(token_name, sizeof(token_name), "mesh_exec run %.100s", run_id);
		body = json_pack("{s:s,s:O,s:i,s:s}", "name", token_name, "scopes", scopes,
						 "access_level", access, "expires_at", date);
		text = body ? json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(body);
		if (text == NULL)
			snprintf(err, MESH_REPOS_ERR_LEN, "out of memory building the mint request");
	}
	json_decref(scopes);
	json_decref(perms);
	return text;
}

/* "2026-12-08" to the start of that day, UTC; 0 on success. */
static int
date_parse(const char *text, time_t *out)
{
	struct tm	tm;
	int			n = 0;

	memset(&tm, 0, sizeof(tm));
	if (text == NULL ||
		sscanf(text, "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &n) != 3 ||
		n != 10 || text[n] != '\0' || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
		tm.tm_mday > 31)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*out = timegm(&tm);
	return 0;
}

/* GitLab's 201 answer: the token's id, value, expiry, scopes and level; 0 on success. */
int
mesh_gitlab_token_parse(const char *body, size_t len, MeshRepoToken *out, char *err)
{
	json_t	   *doc = json_loadb(body, len, 0, NULL);
	json_t	   *id = json_object_get(doc, "id");
	const char *token = json_string_value(json_object_get(doc, "token"));
	const char *expires = json_string_value(json_object_get(doc, "expires_at"));
	json_t	   *granted;
	char		id_text[24];
	int			rc = -1;

	memset(out, 0, sizeof(*out));
	err[0] = '\0';
	if (!json_is_object(doc))
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer is not a JSON object");
	else if (!json_is_integer(id) || json_integer_value(id) <= 0)
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer has no token id");
	else if (!mesh_repo_token_value_valid(token))
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer has no usable token");
	else if (date_parse(expires, &out->expires_at) != 0)
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer has no expires_at date");
	else
	{
		snprintf(id_text, sizeof(id_text), "%lld", (long long) json_integer_value(id));
		granted = json_pack("{s:O?,s:O?}", "scopes", json_object_get(doc, "scopes"),
							"access_level", json_object_get(doc, "access_level"));
		out->token = strdup(token);
		out->provider_token_id = strdup(id_text);
		out->permissions_json = granted ? json_dumps(granted, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(granted);
		rc = (out->token && out->provider_token_id && out->permissions_json) ? 0 : -1;
		if (rc != 0)
		{
			mesh_repo_token_clear(out);
			snprintf(err, MESH_REPOS_ERR_LEN, "out of memory reading the provider's answer");
		}
	}
	json_decref(doc);
	return rc;
}
