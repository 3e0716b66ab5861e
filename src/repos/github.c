/*-------------------------------------------------------------------------
 *
 * github.c
 *	  GitHub's side of minting a repository token: the request that asks
 *	  for an installation access token scoped to one repository and the
 *	  named permissions, and the reader of GitHub's answer.
 *
 * REST reference: "Create an installation access token for an app",
 * POST /app/installations/{installation_id}/access_tokens with the App's
 * JWT as bearer; body {"repositories": [name], "permissions": {...}};
 * answer 201 {"token", "expires_at" (ISO 8601, UTC), "permissions", ...}.
 * "Revoke an installation access token" is DELETE /installation/token
 * with the token itself as bearer (204).  The token travels only in a
 * request header or an answer body, never in a URL.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "repos/repos.h"

/* "owner/name": the characters GitHub allows in each, one slash, no dot-only part. */
int
mesh_repo_name_valid(const char *repository)
{
	const char *slash;
	size_t		owner_len;

	if (repository == NULL || strlen(repository) > 200)
		return 0;
	slash = strchr(repository, '/');
	if (slash == NULL || strchr(slash + 1, '/') != NULL)
		return 0;
	owner_len = slash - repository;
	if (owner_len == 0 || slash[1] == '\0')
		return 0;
	for (const char *p = repository; *p; p++)
		if (p != slash && !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
							(*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
			return 0;
	if (strcmp(slash + 1, ".") == 0 || strcmp(slash + 1, "..") == 0 || repository[0] == '.')
		return 0;
	return 1;
}

/* A permission name GitHub uses: lower case and underscores. */
static int
permission_name_valid(const char *name)
{
	if (*name == '\0' || strlen(name) > 64)
		return 0;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || *p == '_'))
			return 0;
	return 1;
}

/* {"contents": "read", "pull_requests": "write"}: a non-empty object of read/write levels. */
int
mesh_github_permissions_valid(const char *permissions_json)
{
	json_t	   *perms = json_loads(permissions_json, 0, NULL);
	const char *name;
	json_t	   *level;
	int			valid;

	valid = json_is_object(perms) && json_object_size(perms) > 0;
	if (valid)
		json_object_foreach(perms, name, level)
		{
			const char *l = json_string_value(level);

		if (!permission_name_valid(name) || l == NULL ||
			(strcmp(l, "read") != 0 && strcmp(l, "write") != 0))
			valid = 0;
		}
	json_decref(perms);
	return valid;
}

/* The path of the mint call; the installation id is digits (checked), so it cannot alter the path. */
char *
mesh_github_token_path(const char *installation_id)
{
	char	   *path;

	if (installation_id == NULL || *installation_id == '\0' || strlen(installation_id) > 20 ||
		strspn(installation_id, "0123456789") != strlen(installation_id))
		return NULL;
	path = malloc(strlen(installation_id) + 40);
	if (path != NULL)
		sprintf(path, "/app/installations/%s/access_tokens", installation_id);
	return path;
}

/*
 * The mint request's body: exactly this repository (GitHub takes its name
 * without the owner: the installation is the owner's) and these permissions.
 */
char *
mesh_github_token_body(const char *repository, const char *permissions_json, char *err)
{
	json_t	   *body;
	char	   *text;

	err[0] = '\0';
	if (!mesh_repo_name_valid(repository))
	{
		snprintf(err, MESH_REPOS_ERR_LEN, "a repository is named owner/name");
		return NULL;
	}
	if (!mesh_github_permissions_valid(permissions_json))
	{
		snprintf(err, MESH_REPOS_ERR_LEN,
				 "permissions are a non-empty object of \"read\" or \"write\" levels");
		return NULL;
	}
	body = json_pack("{s:[s],s:o}", "repositories", strchr(repository, '/') + 1,
					 "permissions", json_loads(permissions_json, 0, NULL));
	text = body ? json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(body);
	if (text == NULL)
		snprintf(err, MESH_REPOS_ERR_LEN, "out of memory building the mint request");
	return text;
}

/* "2016-07-11T22:14:10Z" (GitHub's expires_at) to seconds since the epoch; 0 on success. */
int
mesh_iso8601_utc_parse(const char *text, time_t *out)
{
	struct tm	tm;
	char		z;
	int			n;

	memset(&tm, 0, sizeof(tm));
	if (text == NULL ||
		sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z, &n) != 7 || z != 'Z' || text[n] != '\0')
		return -1;
	if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
		tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*out = timegm(&tm);
	return 0;
}

/* A token value a provider may answer: 1 to 1024 bytes, nothing that would end a header or a JSON string. */
int
mesh_repo_token_value_valid(const char *token)
{
	return token != NULL && *token != '\0' && strlen(token) <= 1024 &&
		strpbrk(token, " \t\r\n\"\\") == NULL;
}

/* GitHub's 201 answer: the token, its expiry and the permissions granted; 0 on success. */
int
mesh_github_token_parse(const char *body, size_t len, MeshRepoToken *out, char *err)
{
	json_t	   *doc = json_loadb(body, len, 0, NULL);
	const char *token = json_string_value(json_object_get(doc, "token"));
	const char *expires = json_string_value(json_object_get(doc, "expires_at"));
	json_t	   *perms = json_object_get(doc, "permissions");
	int			rc = -1;

	memset(out, 0, sizeof(*out));
	err[0] = '\0';
	if (!json_is_object(doc))
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer is not a JSON object");
	else if (!mesh_repo_token_value_valid(token))
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer has no usable token");
	else if (mesh_iso8601_utc_parse(expires, &out->expires_at) != 0)
		snprintf(err, MESH_REPOS_ERR_LEN, "the provider's answer has no expires_at in UTC");
	else
	{
		out->token = strdup(token);
		out->permissions_json = json_is_object(perms)
			? json_dumps(perms, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
		rc = (out->token && out->permissions_json) ? 0 : -1;
		if (rc != 0)
			snprintf(err, MESH_REPOS_ERR_LEN, "out of memory reading the provider's answer");
	}
	json_decref(doc);
	return rc;
}

/* Forget a token: its bytes are overwritten before the memory is given back. */
void
mesh_repo_token_clear(MeshRepoToken *tok)
{
	if (tok->token != NULL)
	{
		memset(tok->token, 0, strlen(tok->token));
		free(tok->token);
	}
	free(tok->permissions_json);
	free(tok->provider_token_id);
	memset(tok, 0, sizeof(*tok));
}
