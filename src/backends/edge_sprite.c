/*-------------------------------------------------------------------------
 *
 * edge_sprite.c
 *	  The edge driver's sprite life: create by name (or find it asleep),
 *	  leave it to sleep or delete it at release, list for the reaper.
 *
 * Acquire is POST /v1/sprites {"name"}: 201 is a new sprite; 409
 * already_exists is this workspace's own sprite from before (a wake after
 * hibernation, or a create a crash left behind), which wakes on its next
 * request.  Release with hibernation only checks that the sprite is still
 * there (GET): a sprite sleeps on its own when idle, keeping its files.
 * Release without it is DELETE (a sprite already gone is success).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "backends/backend.h"
#include "backends/edge.h"

/* The sprite's name is the workspace's reference; a snapshot cannot be stood on. */
bool
edge_acquire_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					 const MeshAcquireSpec *spec, MeshHttpRequest *req, MeshError *err)
{
	if (!mesh_acquire_without_snapshot(be, spec, err))
		return false;
	edge_begin(be, req, "POST", "/v1/sprites");
	mesh_http_json_body(req, json_pack("{s:s,s:b}", "name", ref, "wait_for_capacity", true));
	return true;
}

/* 201 created, or 409: the sprite of this name is already ours (a wake). */
MeshStepResult
edge_acquire_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshCapabilities *caps, MeshError *err)
{
	MeshError	answer = {0};

	if (!mesh_http_error_from_json(resp, be->name, &answer))
	{
		if (!(resp->status == 409 && answer.code && strcmp(answer.code, "already_exists") == 0))
		{
			*err = answer;
			return MESH_STEP_FAILED;
		}
	}
	else
	{
		json_t	   *doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
		const char *name;
		const char *status;
		bool		ok = edge_sprite_read(doc, &name, &status);

		if (doc)
			json_decref(doc);
		if (!ok)
		{
			mesh_error_set(err, MESH_FAIL_PROTOCOL,
						   "backend \"%s\" answered a create without a sprite", be->name);
			return MESH_STEP_FAILED;
		}
	}
	edge_declared_capabilities(be, caps);
	return MESH_STEP_DONE;
}

bool
edge_release_request(const MeshBackend *be, MeshOpState *st, const char *ref,
					 bool prefer_hibernate, MeshHttpRequest *req, MeshError *err)
{
	st->data = (void *) (intptr_t) prefer_hibernate;
	edge_begin(be, req, prefer_hibernate ? "GET" : "DELETE",
			   psprintf("/v1/sprites/%s", mesh_url_encode(ref)));
	return true;
}

/* Hibernated: the sprite is there and sleeps when idle; destroyed: deleted or gone. */
MeshStepResult
edge_release_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  MeshReleaseOutcome *outcome, MeshError *err)
{
	bool		hibernate = (bool) (intptr_t) st->data;
	MeshError	answer = {0};

	if (!mesh_http_error_from_json(resp, be->name, &answer))
	{
		if (resp->status == 404)
		{
			*outcome = MESH_RELEASE_DESTROYED;
			return MESH_STEP_DONE;
		}
		*err = answer;
		return MESH_STEP_FAILED;
	}
	*outcome = hibernate ? MESH_RELEASE_HIBERNATED : MESH_RELEASE_DESTROYED;
	return MESH_STEP_DONE;
}

/* This install's and this entry's sprites share a name prefix (the service filters by it). */
bool
edge_list_request(const MeshBackend *be, MeshOpState *st, const char *install_id,
				  MeshHttpRequest *req, MeshError *err)
{
	edge_begin(be, req, "GET", psprintf("/v1/sprites?prefix=%s",
										mesh_url_encode(edge_sprite_prefix(be, install_id))));
	return true;
}

MeshStepResult
edge_list_response(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   MeshListedWorkspace **items, int *nitems, MeshError *err)
{
	json_t	   *doc;
	json_t	   *list;
	json_t	   *entry;
	size_t		i;

	if (!mesh_http_error_from_json(resp, be->name, err))
		return MESH_STEP_FAILED;
	doc = json_loadb(resp->body ? resp->body : "", resp->body_len, 0, NULL);
	list = edge_sprite_list(doc);
	if (list == NULL)
	{
		if (doc)
			json_decref(doc);
		mesh_error_set(err, MESH_FAIL_PROTOCOL, "backend \"%s\" answered a list without sprites",
					   be->name);
		return MESH_STEP_FAILED;
	}
	*items = palloc0(sizeof(MeshListedWorkspace) * (json_array_size(list) + 1));
	*nitems = 0;
	json_array_foreach(list, i, entry)
	{
		const char *name;
		const char *status;

		if (!edge_sprite_read(entry, &name, &status))
			continue;
		(*items)[*nitems].ref = pstrdup(name);
		(*items)[*nitems].running = edge_sprite_awake(status);
		(*nitems)++;
	}
	json_decref(doc);
	return MESH_STEP_DONE;
}
