/*
 * fuzz_kubernetes.c - libFuzzer target for the kubernetes driver's readers of API-server
 * answers (src/backends/kubernetes_parse.c: jansson only, so it builds without PostgreSQL).
 * Any bytes are read as a Pod, a Status, a PodList and a watch stream; besides memory errors
 * and leaks, a pod's state must be one of the four and its reason a string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/kubernetes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every reader on one input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_t *doc = k8s_parse_object(text, size);
    bool deleted;
    K8sStatus status;
    json_t *last;

    if (doc) {
        const char *why = NULL;
        K8sPodState state = k8s_pod_state(doc, &why);
        json_t *items = k8s_pod_list_items(doc);
        size_t i;
        json_t *pod;

        if (state > K8S_POD_TERMINATING || why == NULL)
            abort();
        k8s_status_read(doc, &status);
        k8s_pod_labelled(doc, "1", "kube");
        k8s_pod_name(doc);
        json_array_foreach(items, i, pod)
            k8s_pod_state(pod, &why);
        json_decref(doc);
    }
    last = k8s_watch_last(text, size, &deleted, &status);
    if (last) {
        const char *why;
        k8s_pod_state(last, &why);
        json_decref(last);
    }
    return 0;
}
