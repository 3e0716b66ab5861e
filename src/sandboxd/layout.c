/*
 * layout.c - names and paths of the state dir (layout.h): pure string work, and a look at the
 * disk for whether a workspace's files are in a quota slot.
 */
#include "layout.h"
#include "config.h"
#include "util.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* [A-Za-z0-9][A-Za-z0-9._-]{0,127} */
bool workspace_id_valid(const char *id)
{
    size_t len = strlen(id);
    if (len == 0 || len > WORKSPACE_ID_MAX || !((id[0] >= 'a' && id[0] <= 'z') ||
                                                (id[0] >= 'A' && id[0] <= 'Z') ||
                                                (id[0] >= '0' && id[0] <= '9')))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", id[i]))
            return false;
    return true;
}

/* True for a pool name (STANDBY_PREFIX and digits): a standby's, never a workspace id. */
bool standby_name(const char *name)
{
    size_t plen = strlen(STANDBY_PREFIX);
    return strncmp(name, STANDBY_PREFIX, plen) == 0 && name[plen] &&
           strspn(name + plen, "0123456789") == strlen(name + plen);
}

/* <state>/workspaces/<id> */
char *workspace_dir(const char *id)
{
    return xasprintf("%s/workspaces/%s", g_config.state_dir, id);
}

/* <state>/workspaces/<id>/files, mounted as /workspace; <id>/store/files when the workspace
 * has a quota slot (quota.c) */
char *workspace_files_dir(const char *id)
{
    return layout_in_slot(id, "files");
}

/* <state>/workspaces/<id>/work: overlayfs' work directory for a workspace on a snapshot;
 * <id>/store/work in a quota slot (with the upper layer: overlayfs moves files from one to
 * the other, and btrfs never renames across subvolumes) */
char *workspace_work_dir(const char *id)
{
    return layout_in_slot(id, "work");
}

/* <state>/workspaces/<id>/store */
char *layout_store_dir(const char *id)
{
    return xasprintf("%s/workspaces/%s/store", g_config.state_dir, id);
}

/* <state>/workspaces/<id>/store/NAME when workspace ID has a quota slot, else <id>/NAME:
 * decided by what is on disk, so a workspace keeps its files whatever this start found. */
char *layout_in_slot(const char *id, const char *name)
{
    char *store = layout_store_dir(id);
    struct stat st;
    bool slot = lstat(store, &st) == 0 && S_ISDIR(st.st_mode);
    free(store);
    return xasprintf("%s/workspaces/%s/%s%s", g_config.state_dir, id, slot ? "store/" : "", name);
}
