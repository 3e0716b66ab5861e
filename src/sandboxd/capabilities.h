/*
 * capabilities.h - what this host really enforces, detected once at start and reported by GET
 * /v1/capabilities (capabilities.c).
 */
#ifndef MESH_SANDBOXD_CAPABILITIES_H
#define MESH_SANDBOXD_CAPABILITIES_H

#include <jansson.h>

#define MESH_PROTOCOL_VERSION 1

void caps_detect(void);
json_t *caps_to_json(void);

#endif
