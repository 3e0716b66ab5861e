/*-------------------------------------------------------------------------
 *
 * kubernetes_parse.c
 *	  Readers of the Kubernetes API server's answers, free of the server runtime.
 *
 * Shapes follow the Kubernetes API reference (core/v1 Pod, PodList,
 * meta/v1 Status, WatchEvent).  Anything unexpected is read as "not that":
 * a pod without a phase is starting, a list without items is not a list, a
 * watch line that is not an event is skipped.  See kubernetes.h for why
 * this file uses jansson alone.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "backends/kubernetes.h"

/* A JSON object from a response body, or NULL; the caller decrefs. */
json_t *
k8s_parse_object(const char *body, size_t len)
{
	json_t	   *doc = json_loadb(body ? body : "", len, 0, NULL);

	if (doc && !json_is_object(doc))
	{
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static const char *
str_or_empty(json_t *value)
{
	return json_is_string(value) ? json_string_value(value) : "";
}

/* Whether doc is a meta/v1 Status; fills status when it is. */
bool
k8s_status_read(json_t *doc, K8sStatus *status)
{
	json_t	   *code;

	if (!json_is_object(doc) || strcmp(str_or_empty(json_object_get(doc, "kind")), "Status") != 0)
		return false;
	code = json_object_get(doc, "code");
	status->code = json_is_integer(code) ? (long) json_integer_value(code) : 0;
	status->reason = str_or_empty(json_object_get(doc, "reason"));
	status->message = str_or_empty(json_object_get(doc, "message"));
	return true;
}

/* Waiting reasons after which a container will not start without an operator. */
static bool
stuck_reason(const char *reason)
{
	static const char *const stuck[] = {
		"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
		"CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff",
		"RunContainerError",
	};

	for (size_t i = 0; i < sizeof(stuck) / sizeof(stuck[0]); i++)
		if (strcmp(reason, stuck[i]) == 0)
			return true;
	return false;
}

/* The first container stuck waiting, as "reason: message"; NULL when none. */
static const char *
stuck_container(json_t *status)
{
	json_t	   *containers = json_object_get(status, "containerStatuses");
	json_t	   *c;
	size_t		i;

	if (!json_is_array(containers))
		return NULL;
	json_array_foreach(containers, i, c)
	{
		json_t	   *waiting = json_object_get(json_object_get(c, "state"), "waiting");
		const char *reason = str_or_empty(json_object_get(waiting, "reason"));

		if (stuck_reason(reason))
			return reason;
	}
	return NULL;
}

/* Whether the pod's Ready condition is True. */
static bool
ready_condition(json_t *status)
{
	json_t	   *conditions = json_object_get(status, "conditions");
	json_t	   *c;
	size_t		i;

	if (!json_is_array(conditions))
		return false;
	json_array_foreach(conditions, i, c)
	{
		if (strcmp(str_or_empty(json_object_get(c, "type")), "Ready") == 0)
			return strcmp(str_or_empty(json_object_get(c, "status")), "True") == 0;
	}
	return false;
}

/*
 * Where a pod stands; *why says what is wrong for a broken one (the phase's
 * reason or the stuck container's), "" otherwise.
 */
K8sPodState
k8s_pod_state(json_t *pod, const char **why)
{
	json_t	   *status = json_object_get(pod, "status");
	const char *phase = str_or_empty(json_object_get(status, "phase"));
	const char *stuck;

	*why = "";
	if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") != NULL)
		return K8S_POD_TERMINATING;
	if (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)
	{
		const char *reason = str_or_empty(json_object_get(status, "reason"));

		*why = reason[0] ? reason : phase;
		return K8S_POD_BROKEN;
	}
	if ((stuck = stuck_container(status)) != NULL)
	{
		*why = stuck;
		return K8S_POD_BROKEN;
	}
	if (strcmp(phase, "Running") == 0 && ready_condition(status))
		return K8S_POD_READY;
	return K8S_POD_STARTING;
}

/* Whether the pod carries this install's and this catalog entry's labels. */
bool
k8s_pod_labelled(json_t *pod, const char *install_id, const char *backend)
{
	json_t	   *labels = json_object_get(json_object_get(pod, "metadata"), "labels");

	return strcmp(str_or_empty(json_object_get(labels, K8S_LABEL_INSTALL)), install_id) == 0 &&
		strcmp(str_or_empty(json_object_get(labels, K8S_LABEL_BACKEND)), backend) == 0;
}

/* metadata.name, or NULL. */
const char *
k8s_pod_name(json_t *pod)
{
	json_t	   *name = json_object_get(json_object_get(pod, "metadata"), "name");

	return json_is_string(name) ? json_string_value(name) : NULL;
}

/*
 * A watch answer is newline-delimited WatchEvents.  Returns a new reference
 * to the object of the last ADDED/MODIFIED event (NULL when none), sets
 * *deleted when the last event was DELETED, and fills error (code 0 when
 * none) from an ERROR event's Status.
 */
json_t *
k8s_watch_last(const char *body, size_t len, bool *deleted, K8sStatus *error)
{
	json_t	   *last = NULL;
	size_t		pos = 0;

	*deleted = false;
	memset(error, 0, sizeof(*error));
	while (pos < len)
	{
		const char *line = body + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t		n = nl ? (size_t) (nl - line) : len - pos;
		json_t	   *event = json_loadb(line, n, 0, NULL);
		const char *type = str_or_empty(json_object_get(event, "type"));
		json_t	   *object = json_object_get(event, "object");

		pos += n + (nl != NULL);
		if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
		{
			if (json_is_object(object))
			{
				if (last)
					json_decref(last);
				last = json_incref(object);
				*deleted = false;
			}
		}
		else if (strcmp(type, "DELETED") == 0)
			*deleted = true;
		else if (strcmp(type, "ERROR") == 0)
		{
			static K8sStatus unknown = {500, "", ""};

			/* the Status lives in the event, which is freed below: keep only the code */
			if (!k8s_status_read(object, error))
				*error = unknown;
			error->reason = "";
			error->message = "";
		}
		if (event)
			json_decref(event);
	}
	return last;
}

/* The items array of a PodList, or NULL when doc is not one. */
json_t *
k8s_pod_list_items(json_t *doc)
{
	json_t	   *items = json_object_get(doc, "items");

	if (strcmp(str_or_empty(json_object_get(doc, "kind")), "PodList") != 0 || !json_is_array(items))
		return NULL;
	return items;
}
