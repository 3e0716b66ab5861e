/*-------------------------------------------------------------------------
 *
 * edge.h
 *	  The edge driver's readers of Sprites API answers, and the driver's
 *	  shared request start.
 *
 * edge_parse.c reads what the Sprites API sends (a sprite, a list of
 * sprites) with jansson alone: no palloc, no ereport, no server runtime, so
 * the readers of untrusted bytes can be unit-tested and fuzzed outside
 * PostgreSQL.  Every string returned points into the document passed in.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_EDGE_H
#define MESH_EDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

/* A sprite object's name and runtime status ("cold", "warm", "running"). */
extern bool edge_sprite_read(json_t *doc, const char **name, const char **status);
/* The "sprites" array of a list answer; NULL when the answer has none. */
extern json_t *edge_sprite_list(json_t *doc);
/* Whether a sprite's status means its processes may run (not "cold"). */
extern bool edge_sprite_awake(const char *status);

#ifdef MESH_BACKEND_H
extern void edge_begin(const MeshBackend *be, MeshHttpRequest *req, const char *method,
					   const char *path);
extern const MeshDriver mesh_sandboxd_driver;
extern char *edge_sprite_prefix(const MeshBackend *be, const char *install_id);

/* edge_sprite.c: the sprite's life */
extern bool edge_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								 const MeshAcquireSpec *spec, MeshHttpRequest *req,
								 MeshError *err);
extern MeshStepResult edge_acquire_response(const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp,
											MeshCapabilities *caps, MeshError *err);
extern bool edge_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
								 bool prefer_hibernate, MeshHttpRequest *req, MeshError *err);
extern MeshStepResult edge_release_response(const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp,
											MeshReleaseOutcome *outcome, MeshError *err);
extern bool edge_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
							  MeshHttpRequest *req, MeshError *err);
extern MeshStepResult edge_list_response(const MeshBackend *be, MeshOpState *st,
										 const MeshHttpResponse *resp,
										 MeshListedWorkspace **items, int *nitems,
										 MeshError *err);
extern void edge_declared_capabilities(const MeshBackend *be, MeshCapabilities *caps);
#endif

#endif							/* MESH_EDGE_H */
