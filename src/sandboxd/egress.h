/*
 * egress.h - a workspace's network access: the allowlist proxy in its network namespace and
 * the denials it records (egress.c).
 */
#ifndef MESH_SANDBOXD_EGRESS_H
#define MESH_SANDBOXD_EGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "registry.h"

#define EGRESS_PORT 3128          /* the proxy's address inside every sandbox: 127.0.0.1:3128 */
struct egress;
bool egress_detect(void);
bool egress_pattern_valid(const char *pattern);
bool egress_add_test_name(const char *spec);
bool egress_wanted(struct workspace *ws);
bool egress_start(struct workspace *ws);
void egress_stop(struct workspace *ws);
struct egress *egress_mark(struct workspace *ws, uint64_t *seq);
json_t *egress_denials_since(struct egress *eg, uint64_t seq);

#endif
