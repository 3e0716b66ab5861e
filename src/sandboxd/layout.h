/*
 * layout.h - names and paths of the state dir: which ids are valid, where a workspace's
 * directories are (inside its quota slot or not), and the names the daemon keeps for itself
 * there (layout.c).
 *
 * <state>/workspaces/<id>                  a workspace: meta.json, files (its /workspace) and,
 *                                          on a snapshot, work (overlayfs' work directory)
 * <state>/workspaces/<id>/store/{files,work}  the same in a quota slot (quota.c)
 * <state>/workspaces/_standby-N            a standby holder's directory (standby.c)
 */
#ifndef MESH_SANDBOXD_LAYOUT_H
#define MESH_SANDBOXD_LAYOUT_H

#include <stdbool.h>

#define WORKSPACE_ID_MAX 128
#define STANDBY_PREFIX "_standby-"         /* a standby's name: this and digits, never an id */
#define FILES_TEMP_PREFIX ".mesh-write-"   /* an atomic write's temporary file, beside its target */

bool workspace_id_valid(const char *id);
bool standby_name(const char *name);
char *workspace_dir(const char *id);
char *workspace_files_dir(const char *id);
char *workspace_work_dir(const char *id);
char *layout_store_dir(const char *id);
char *layout_in_slot(const char *id, const char *name);

#endif
