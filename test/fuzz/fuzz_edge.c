/*
 * fuzz_edge.c - libFuzzer target for the edge driver's readers of Sprites API answers
 * (src/backends/edge_parse.c: jansson only, so it builds without PostgreSQL).  Any bytes are
 * read as a sprite and as a list of sprites; besides memory errors and leaks, a sprite that
 * reads must have a name and a status.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/edge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every reader on one input, and on each listed entry. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    const char *name = NULL, *status = NULL;
    json_t *list, *entry;
    size_t i;

    if (doc == NULL)
        return 0;
    if (edge_sprite_read(doc, &name, &status) && (name == NULL || status == NULL))
        abort();
    edge_sprite_awake(status);
    list = edge_sprite_list(doc);
    json_array_foreach(list, i, entry)
        if (edge_sprite_read(entry, &name, &status))
            edge_sprite_awake(status);
    json_decref(doc);
    return 0;
}
