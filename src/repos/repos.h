/*-------------------------------------------------------------------------
 *
 * repos.h
 *	  Repository providers' protocol pieces (issue 31): the GitHub App JWT
 *	  (RS256, libcrypto), the request that mints an installation token (or,
 *	  on GitLab, a project access token) for exactly one repository and its
 *	  permissions, and the reader of the provider's answer.  Pure build/parse functions on the C library,
 *	  libcrypto and jansson: no server runtime, so the worker and the unit
 *	  tests (test/repos/repos_test.c) use the same code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_REPOS_H
#define MESH_REPOS_H

#include <stddef.h>
#include <time.h>

/* GitHub's rules for an App JWT: iat a minute in the past (clock drift), exp at most 10 min on. */
#define MESH_GITHUB_JWT_BACKDATE 60
#define MESH_GITHUB_JWT_LIFETIME 540

/* The longest a minted repository token may live, in seconds (the issue: ≤ 1 h). */
#define MESH_REPO_TOKEN_MAX_LIFETIME 3600

/* Error text buffers: stable short messages, never a key or a token. */
#define MESH_REPOS_ERR_LEN 160

extern char *mesh_github_app_jwt(const char *app_id, const char *private_key_pem,
								 time_t now, char *err);
extern int	mesh_repo_name_valid(const char *repository);
extern int	mesh_github_permissions_valid(const char *permissions_json);
extern char *mesh_github_token_path(const char *installation_id);
extern char *mesh_github_token_body(const char *repository, const char *permissions_json,
									char *err);

/* What a provider answered to a mint: the token (to be held only where the sandbox fetches it). */
typedef struct MeshRepoToken
{
	char	   *token;
	time_t		expires_at;
	char	   *permissions_json;	/* what the provider granted, as it said */
	char	   *provider_token_id;	/* the provider's id for it (GitLab's, to revoke it); or NULL */
} MeshRepoToken;

extern int	mesh_github_token_parse(const char *body, size_t len, MeshRepoToken *out, char *err);
extern int	mesh_repo_token_value_valid(const char *token);
extern void mesh_repo_token_clear(MeshRepoToken *tok);
extern int	mesh_iso8601_utc_parse(const char *text, time_t *out);

/*
 * GitLab project access tokens (src/repos/gitlab.c).  Access levels are
 * GitLab's role numbers: a grant that writes anything gets Developer, one
 * that only reads gets Reporter.
 */
#define MESH_GITLAB_REPORTER 20
#define MESH_GITLAB_DEVELOPER 30

extern char *mesh_gitlab_token_path(const char *repository, const char *token_id);
extern char *mesh_gitlab_token_body(const char *run_id, const char *permissions_json, time_t now,
									char *err);
extern int	mesh_gitlab_token_parse(const char *body, size_t len, MeshRepoToken *out, char *err);

#endif							/* MESH_REPOS_H */
