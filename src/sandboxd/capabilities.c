/*
 * capabilities.c - detection of what this host really enforces.
 *
 * Capabilities are detected once at start (never assumed) and reported by
 * GET /v1/capabilities; the extension branches on them, never on the backend's identity.
 */
#include "capabilities.h"
#include "cgroup.h"
#include "config.h"
#include "egress.h"
#include "hostsetup.h"
#include "log.h"
#include "quota.h"
#include "seccomp.h"
#include "snapshot.h"
#include "tiers.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* True when the sandbox base has an executable /bin/sh (so argv may name a shell). */
static bool base_has_shell(void)
{
    char *path = xasprintf("%s/bin/sh", g_config.rootfs ? g_config.rootfs : "");
    bool ok = access(path, X_OK) == 0;
    free(path);
    return ok;
}

/* Detects capabilities from the cgroup hierarchies we could prepare and the base image. */
void caps_detect(void)
{
    g_caps.shell = base_has_shell();
    g_caps.resource_limits = cgroup_available(CG_MEMORY) && cgroup_available(CG_PIDS) &&
                             cgroup_available(CG_CPU);
    g_caps.compute_metering = cgroup_available(CG_CPUACCT);
    g_caps.egress_control = egress_detect();   /* the per-workspace proxy can be set up */
    g_caps.disk_limits = host_disk_isolated();
    g_caps.seccomp = seccomp_detect();          /* the system-call filter works here */
    /* the filter is what keeps a workspace from making a subvolume outside its quota */
    quota_init();
    g_caps.disk_quota = g_caps.disk_limits && quota_layout() && g_caps.seccomp;
    /* overlay mounts in a user namespace; never in a pod's daemon (single.c) */
    g_caps.snapshot = !g_config.single_workspace && snapshot_detect();
    g_caps.hibernate = true;
    g_caps.caller_chosen_id = true;
    g_caps.background = true;                   /* background execs (background.c) */
    g_caps.extend_timeout = true;               /* extend calls move a running exec's deadline */
    log_event("capabilities: shell=%d resource_limits=%d compute_metering=%d egress_control=%d "
              "disk_limits=%d disk_quota=%d seccomp=%d snapshot=%d", g_caps.shell,
              g_caps.resource_limits, g_caps.compute_metering, g_caps.egress_control,
              g_caps.disk_limits, g_caps.disk_quota, g_caps.seccomp, g_caps.snapshot);
}

/* The GET /v1/capabilities document. */
json_t *caps_to_json(void)
{
    json_t *tier_obj = json_object();
    size_t n;
    const struct size_tier *t = tier_table(&n);
    /* disk_bytes: the tier's quota on this host (null without one) */
    for (size_t i = 0; i < n; i++)
        json_object_set_new(
            tier_obj, t[i].name,
            json_pack("{s:I,s:f,s:I,s:o,s:I,s:I}", "memory_mb", (json_int_t)t[i].memory_mb,
                      "cpus", t[i].cpus, "pids", (json_int_t)t[i].pids, "disk_bytes",
                      g_caps.disk_quota ? json_integer((json_int_t)quota_tier_bytes(&t[i]))
                                        : json_null(),
                      "inotify_instances", (json_int_t)t[i].inotify_instances,
                      "inotify_watches", (json_int_t)t[i].inotify_watches));
    return json_pack(
        "{s:i,s:{s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b},s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I}}",
        "protocol",
        MESH_PROTOCOL_VERSION, "capabilities", "shell", g_caps.shell, "resource_limits",
        g_caps.resource_limits, "compute_metering", g_caps.compute_metering, "egress_control",
        g_caps.egress_control, "disk_limits", g_caps.disk_limits, "disk_quota",
        g_caps.disk_quota, "snapshot", g_caps.snapshot,
        "hibernate", g_caps.hibernate, "caller_chosen_id", g_caps.caller_chosen_id, "seccomp",
        g_caps.seccomp, "background", g_caps.background, "extend_timeout",
        g_caps.extend_timeout, "tiers", tier_obj, "limits",
        "max_body_bytes", (json_int_t)g_config.max_body_bytes, "max_file_bytes",
        (json_int_t)g_config.max_file_bytes, "max_output_bytes",
        (json_int_t)g_config.max_output_bytes, "max_kept_output_bytes",
        (json_int_t)g_config.max_kept_output_bytes, "background_buffer_bytes",
        (json_int_t)g_config.background_buffer_bytes, "background_buffer_total",
        (json_int_t)g_config.background_buffer_total);
}
