/*-------------------------------------------------------------------------
 *
 * worker_command.h
 *	  What foreground and background commands share (src/worker_command.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_WORKER_COMMAND_H
#define MESH_WORKER_COMMAND_H

#include "worker_op.h"

extern bool admit_background(WorkerCall *call, bool reply);
extern MeshExecStatus exec_status(const MeshExecResult *r);
extern const char *exec_disk_quota_error(const MeshExecResult *r);
extern double seconds_since(TimestampTz start);
extern void charge_budget(WorkerCall *call, double charged);
extern bool record_exec_end_only(WorkerCall *call, const MeshExecRecord *rec);
extern void finish_exec_failed(WorkerCall *call);

#endif							/* MESH_WORKER_COMMAND_H */
