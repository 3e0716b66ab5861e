/*
 * fuzz_repos.c - libFuzzer target for the repository providers' readers (src/repos/github.c and
 * src/repos/gitlab.c: jansson only, so they build without PostgreSQL).  Any bytes are read as
 * GitLab's and GitHub's answer to a mint, and as a grant's permissions for GitLab's request
 * body; besides memory errors and leaks: an accepted answer has a token fit for a header and
 * (GitLab) a numeric id, a refused one leaves nothing behind, and an accepted body is JSON
 * naming a Reporter or Developer level.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "repos/repos.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MESH_REPOS_ERR_LEN];
    MeshRepoToken tok;
    char *text, *body;
    json_t *doc;
    json_int_t level;

    if (mesh_gitlab_token_parse((const char *)data, size, &tok, err) == 0)
    {
        if (!mesh_repo_token_value_valid(tok.token) || tok.provider_token_id == NULL ||
            tok.provider_token_id[0] == '\0' ||
            strspn(tok.provider_token_id, "0123456789") != strlen(tok.provider_token_id))
            abort();
        mesh_repo_token_clear(&tok);
    }
    else if (tok.token != NULL || tok.provider_token_id != NULL || tok.permissions_json != NULL || err[0] == '\0')
        abort();
    if (mesh_github_token_parse((const char *)data, size, &tok, err) == 0)
    {
        if (!mesh_repo_token_value_valid(tok.token))
            abort();
        mesh_repo_token_clear(&tok);
    }
    text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    body = mesh_gitlab_token_body("run-1", text, 1765000000, err);
    if (body != NULL)
    {
        doc = json_loads(body, 0, NULL);
        level = json_integer_value(json_object_get(doc, "access_level"));
        if (doc == NULL || (level != MESH_GITLAB_REPORTER && level != MESH_GITLAB_DEVELOPER) ||
            json_array_size(json_object_get(doc, "scopes")) == 0)
            abort();
        json_decref(doc);
        free(body);
    }
    free(text);
    return 0;
}
