/*
 * parsers_test.c - unit tests of the kubernetes driver's readers of API answers
 * (src/backends/kubernetes_parse.c) against the answers in fixtures/, as TAP.
 * Built and run by test/e2e/kubernetes_parsers.t: cc -I src ... -ljansson.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/kubernetes.h"

static int n;
static int failed;
static const char *dir;

/* One TAP line. */
static void
ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

/* A fixture's bytes (malloc'd), or exit: a missing fixture is a broken test. */
static char *
slurp(const char *name, size_t *len)
{
	char		path[4096];
	FILE	   *f;
	char	   *buf;
	long		size;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((f = fopen(path, "rb")) == NULL)
	{
		printf("Bail out! cannot read %s\n", path);
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	buf = malloc(size + 1);
	*len = fread(buf, 1, size, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}

static json_t *
fixture(const char *name)
{
	size_t		len;
	char	   *text = slurp(name, &len);
	json_t	   *doc = k8s_parse_object(text, len);

	free(text);
	return doc;
}

/* The state and reason the readers find in a pod fixture. */
static void
pod_is(const char *name, K8sPodState want, const char *want_why, const char *what)
{
	json_t	   *pod = fixture(name);
	const char *why = "(not a pod)";
	K8sPodState got = pod ? k8s_pod_state(pod, &why) : (K8sPodState) -1;

	ok(got == want && strcmp(why, want_why) == 0, what);
	if (got != want || strcmp(why, want_why) != 0)
		printf("#   got state %d why \"%s\"\n", (int) got, why);
	if (pod)
		json_decref(pod);
}

static void
status_is(const char *name, long code, const char *reason, const char *what)
{
	json_t	   *doc = fixture(name);
	K8sStatus	st;

	ok(doc && k8s_status_read(doc, &st) && st.code == code && strcmp(st.reason, reason) == 0 &&
	   st.message[0] != '\0', what);
	if (doc)
		json_decref(doc);
}

static void
watch_is(const char *name, const char *want_name, K8sPodState want, bool want_deleted,
		 long want_error, const char *what)
{
	size_t		len;
	char	   *text = slurp(name, &len);
	bool		deleted;
	K8sStatus	error;
	json_t	   *pod = k8s_watch_last(text, len, &deleted, &error);
	const char *why;
	bool		good = deleted == want_deleted && error.code == want_error;

	if (want_name)
		good = good && pod && strcmp(k8s_pod_name(pod), want_name) == 0 && k8s_pod_state(pod, &why) == want;
	else
		good = good && pod == NULL;
	ok(good, what);
	if (pod)
		json_decref(pod);
	free(text);
}

int
main(int argc, char **argv)
{
	const char *ref = "mesh-7714877209437461020-12";
	json_t	   *doc;
	json_t	   *items;

	dir = argc > 1 ? argv[1] : "test/kubernetes/fixtures";
	printf("1..24\n");
	pod_is("pod-created.json", K8S_POD_STARTING, "", "a just-created pod is starting");
	pod_is("pod-running-not-ready.json", K8S_POD_STARTING, "", "Running without the Ready condition is still starting");
	pod_is("pod-ready.json", K8S_POD_READY, "", "Running and Ready True is ready");
	pod_is("pod-image-pull-backoff.json", K8S_POD_BROKEN, "ImagePullBackOff", "a container stuck pulling its image is broken, with the reason");
	pod_is("pod-failed.json", K8S_POD_BROKEN, "Failed", "phase Failed is broken");
	pod_is("pod-evicted.json", K8S_POD_BROKEN, "Evicted", "an evicted pod is broken, with the status reason");
	pod_is("pod-terminating.json", K8S_POD_TERMINATING, "", "a deletionTimestamp means terminating, whatever the phase");

	doc = fixture("pod-ready.json");
	ok(doc && strcmp(k8s_pod_name(doc), ref) == 0, "the pod's name is read from metadata");
	ok(doc && k8s_pod_labelled(doc, "7714877209437461020", "kube"), "a pod with this install's and backend's labels is ours");
	ok(doc && !k8s_pod_labelled(doc, "7714877209437461020", "other") &&
	   !k8s_pod_labelled(doc, "1", "kube"), "another backend's or install's pod is not");
	ok(doc && !k8s_status_read(doc, &(K8sStatus) {0}), "a Pod is not a Status");
	json_decref(doc);

	status_is("status-409-already-exists.json", 409, "AlreadyExists", "409 AlreadyExists is read as a Status");
	status_is("status-401.json", 401, "Unauthorized", "401 Unauthorized");
	status_is("status-403.json", 403, "Forbidden", "403 Forbidden, with the server's message");
	status_is("status-404-pod.json", 404, "NotFound", "404 NotFound");
	status_is("status-422-invalid.json", 422, "Invalid", "422 Invalid");
	status_is("status-500.json", 500, "InternalError", "500 InternalError");

	doc = fixture("podlist.json");
	items = doc ? k8s_pod_list_items(doc) : NULL;
	ok(items && json_array_size(items) == 5, "a PodList's items are found");
	json_decref(doc);
	doc = fixture("pod-ready.json");
	ok(k8s_pod_list_items(doc) == NULL, "a Pod is not a PodList");
	json_decref(doc);
	doc = fixture("podlist-empty.json");
	ok(doc && k8s_pod_list_items(doc) && json_array_size(k8s_pod_list_items(doc)) == 0, "an empty PodList is a list");
	json_decref(doc);

	watch_is("watch-becomes-ready.jsonl", ref, K8S_POD_READY, false, 0, "a watch's last event decides: ready");
	watch_is("watch-still-starting.jsonl", ref, K8S_POD_STARTING, false, 0, "a window without Ready: still starting");
	watch_is("watch-deleted.jsonl", ref, K8S_POD_TERMINATING, true, 0, "a DELETED last event is reported as deleted");
	watch_is("watch-error-gone.jsonl", NULL, K8S_POD_STARTING, false, 410, "an ERROR event's Status code is reported, with no pod");
	return failed ? 1 : 0;
}
