/*
 * standby.h - the pool of standby holders kept ready for new workspaces (standby.c).
 */
#ifndef MESH_SANDBOXD_STANDBY_H
#define MESH_SANDBOXD_STANDBY_H

#include <stdbool.h>
#include "registry.h"

bool standby_adopt(struct workspace *ws);
void standby_init(void);
void standby_shutdown(void);
void standby_room_freed(void);

#endif
