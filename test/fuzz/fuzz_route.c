/*
 * fuzz_route.c - libFuzzer target for request routing (src/sandboxd/route.c): arbitrary bytes
 * as the request path. Checks what dispatch relies on: at most ROUTE_MAX_SEGMENTS non-empty
 * segments without '/', and a named route only under /v1/ with its id segment present.
 */
#include "route.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One path: the bytes up to the first NUL, as libmicrohttpd would hand them over. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = strndup((const char *)data, size);
    struct route_path path;
    enum route_kind kind = route_match(url, &path);
    if (path.count > ROUTE_MAX_SEGMENTS)
        abort();
    for (int i = 0; i < path.count; i++)
        if (!path.segments[i][0] || strchr(path.segments[i], '/'))
            abort();
    if (kind != ROUTE_NONE && strcmp(path.segments[0], "v1") != 0)
        abort();
    if (kind >= ROUTE_WORKSPACE && path.count < 3)
        abort();
    route_path_free(&path);
    free(url);
    return 0;
}
