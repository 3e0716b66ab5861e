/*
 * http.h - the HTTP front: listeners, authentication, routing, and the drain (http.c).
 */
#ifndef MESH_SANDBOXD_HTTP_H
#define MESH_SANDBOXD_HTTP_H

#include <stdbool.h>

bool http_start(void);
void http_stop(void (*each_turn)(void));

#endif
