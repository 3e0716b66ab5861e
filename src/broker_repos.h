/*-------------------------------------------------------------------------
 *
 * broker_repos.h
 *	  The broker's repository-token endpoint (issue 31): a sandbox's git
 *	  credential helper asks for the current token of one repository on
 *	  one host; minted lazily, revoked at release.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_BROKER_REPOS_H
#define MESH_BROKER_REPOS_H

#include "postgres.h"

#include <jansson.h>

#define MESH_BROKER_REPOS_PREFIX "/v1/repositories/"

extern unsigned int mesh_broker_repository_token(const char *url, const char *token,
												 const char *ref, json_t **answer);
extern void mesh_broker_revoke_pending(void);

#endif							/* MESH_BROKER_REPOS_H */
