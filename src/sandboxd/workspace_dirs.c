/*
 * workspace_dirs.c - a workspace's directories on disk (also a standby's): made in a quota
 * slot of its tier when the host has quotas, with the overlay's work directory for a workspace
 * on a snapshot, and removed with the slot given back to its pool first.
 */
#include "workspace_dirs.h"
#include "config.h"
#include "layout.h"
#include "quota.h"
#include "snapshot.h"
#include "util.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Removes workspace directory DIR (of a workspace or a standby), its quota slot first: the
 * slot goes back to its pool emptied, never deleted. */
bool workspace_dir_remove(const char *dir)
{
    return quota_slot_return(dir) && remove_tree(dir);
}

/* Creates <id>/ and <id>/files (owned by the sandbox user), with disk quotas inside a quota
 * slot of the workspace's tier (errno EDQUOT when none is free). */
bool workspace_make_dirs(struct workspace *ws)
{
    char *dir = workspace_dir(ws->id);
    bool ok = (mkdir(dir, 0711) == 0 || errno == EEXIST) &&
              (!quota_layout() || quota_slot_take(ws->tier, dir));
    int error = errno;   /* EDQUOT: no slot free (the caller tells it apart) */
    char *files = workspace_files_dir(ws->id);
    errno = error;
    ok = ok && (mkdir(files, 0700) == 0 || errno == EEXIST) &&
              (!g_config.is_root ||
               chown(files, g_config.sandbox_uid, g_config.sandbox_gid) == 0) &&
              snapshot_make_work_dir(ws);
    free(dir);
    free(files);
    return ok;
}
