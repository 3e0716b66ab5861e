/*-------------------------------------------------------------------------
 *
 * credentials.h
 *	  Per-run tokens and keeping delivered secrets out of what is stored.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_CREDENTIALS_H
#define MESH_CREDENTIALS_H

#include "postgres.h"

/* Where a workspace finds its run token (a documented path). */
#define MESH_TOKEN_PATH ".mesh/run-token"

/* A secret an exec may meet: delivered into its environment, or (variable NULL) only redacted. */
typedef struct MeshDelivered
{
	char	   *variable;
	char	   *name;
	char	   *value;
} MeshDelivered;

extern char *mesh_token_new(char **hash_hex);
extern char *mesh_token_hash_hex(const char *token);
extern void mesh_redact(char **data, size_t *len, const char *secret, const char *label);
extern char *mesh_redact_json(char *json_text, const char *secret, const char *label);
extern void mesh_forget(char *secret);

/* src/broker.c */
extern char *mesh_broker_socket_path(const char *ref);
extern void mesh_broker_forget_workspace(const char *ref);

#endif							/* MESH_CREDENTIALS_H */
