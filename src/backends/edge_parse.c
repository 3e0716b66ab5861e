/*-------------------------------------------------------------------------
 *
 * edge_parse.c
 *	  Pure readers of Sprites API answers for the edge driver.
 *
 * jansson only (no palloc, no ereport): the driver (edge_sprite.c) turns
 * what these find into results and MeshErrors, and the readers can run
 * outside PostgreSQL.  An answer of the wrong shape is "not found" here,
 * never a crash.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "backends/edge.h"

/* A sprite as POST/GET /v1/sprites answer it: a name and a status, both strings. */
bool
edge_sprite_read(json_t *doc, const char **name, const char **status)
{
	json_t	   *n = json_is_object(doc) ? json_object_get(doc, "name") : NULL;
	json_t	   *s = json_is_object(doc) ? json_object_get(doc, "status") : NULL;

	if (!json_is_string(n) || !json_is_string(s))
		return false;
	*name = json_string_value(n);
	*status = json_string_value(s);
	return true;
}

/* GET /v1/sprites answers {"sprites": [...], "has_more": ...}. */
json_t *
edge_sprite_list(json_t *doc)
{
	json_t	   *list = json_is_object(doc) ? json_object_get(doc, "sprites") : NULL;

	return json_is_array(list) ? list : NULL;
}

/* "cold" is a sleeping sprite: files kept, no process running. */
bool
edge_sprite_awake(const char *status)
{
	return status != NULL && strcmp(status, "cold") != 0;
}
