/*
 * tiers.c - the one size-tier table and its look-ups.
 */
#include "tiers.h"
#include <string.h>

/* The one size-tier table: memory, CPU and pid limits applied through cgroups; disk (never
 * more than a quarter of the workspaces' filesystem) and inotify bounds (quota.c). */
static const struct size_tier tiers[] = {
    {"small", 512, 0.5, 128, 2048, 32, 8192},
    {"standard", 2048, 1.0, 512, 8192, 64, 16384},
    {"large", 4096, 2.0, 1024, 16384, 128, 32768},
    {"xlarge", 8192, 2.0, 2048, 32768, 128, 65536},
};

/* Looks a tier up by its protocol name; NULL when unknown. */
const struct size_tier *tier_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
        if (strcmp(tiers[i].name, name) == 0)
            return &tiers[i];
    return NULL;
}

/* The whole table, for the capabilities document and docs. */
const struct size_tier *tier_table(size_t *count)
{
    *count = sizeof tiers / sizeof tiers[0];
    return tiers;
}
