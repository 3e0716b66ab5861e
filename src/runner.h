/*-------------------------------------------------------------------------
 *
 * runner.h
 *	  The one driver runner: drives any driver operation to its end.
 *
 * A driver operation is a request builder and a response parser (backend.h)
 * that may ask for further requests.  A MeshDriverRun holds one operation
 * in progress: the runner sends each request, gives each response to the
 * parser and sends what the parser asks for next, until the parser is done
 * or fails.  The worker's pool advances many runs at once from its loop
 * (mesh_run_ready, mesh_run_step); the reaper, recovery and a worker's exit
 * wait for theirs against a deadline (mesh_run_until).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_RUNNER_H
#define MESH_RUNNER_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "backends/backend.h"
#include "worker_http.h"

/* An operation's response parser, with its result behind a pointer of its own type. */
typedef MeshStepResult (*MeshResponseParser) (const MeshBackend *be, MeshOpState *st,
											   const MeshHttpResponse *resp, void *out,
											   MeshError *err);

/* A read's result: the file's bytes, in the last response's body. */
typedef struct MeshFileData
{
	const char *data;
	size_t		len;
} MeshFileData;

/* A list call's result. */
typedef struct MeshListing
{
	MeshListedWorkspace *items;
	int			nitems;
} MeshListing;

/* The parsers of the contract's operations, each with its result type. */
extern MeshStepResult mesh_parse_acquire(const MeshBackend *be, MeshOpState *st,
										 const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshCapabilities */
extern MeshStepResult mesh_parse_exec(const MeshBackend *be, MeshOpState *st,
									  const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshExecResult */
extern MeshStepResult mesh_parse_kill(const MeshBackend *be, MeshOpState *st,
									  const MeshHttpResponse *resp, void *out, MeshError *err);
extern MeshStepResult mesh_parse_extend(const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp, void *out,
										MeshError *err);	/* int64_t: the backend's timeout */	/* none */
extern MeshStepResult mesh_parse_exec_start(const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp, void *out, MeshError *err);	/* none */
extern MeshStepResult mesh_parse_exec_output(const MeshBackend *be, MeshOpState *st,
											 const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshExecProgress */
extern MeshStepResult mesh_parse_exec_forget(const MeshBackend *be, MeshOpState *st,
											 const MeshHttpResponse *resp, void *out, MeshError *err);	/* none */
extern MeshStepResult mesh_parse_read(const MeshBackend *be, MeshOpState *st,
									  const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshFileData */
extern MeshStepResult mesh_parse_write(const MeshBackend *be, MeshOpState *st,
									   const MeshHttpResponse *resp, void *out, MeshError *err);	/* none */
extern MeshStepResult mesh_parse_release(const MeshBackend *be, MeshOpState *st,
										 const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshReleaseOutcome */
extern MeshStepResult mesh_parse_list(const MeshBackend *be, MeshOpState *st,
									  const MeshHttpResponse *resp, void *out, MeshError *err);	/* MeshListing */

/* A snapshot list call's result. */
typedef struct MeshSnapshotListing
{
	MeshSnapshotInfo *items;
	int			nitems;
} MeshSnapshotListing;

/* The parsers of the snapshot capability's operations (drivers that declare it). */
extern MeshStepResult mesh_parse_snapshot_capture(const MeshBackend *be, MeshOpState *st,
												  const MeshHttpResponse *resp, void *out,
												  MeshError *err);	/* MeshSnapshotInfo */
extern MeshStepResult mesh_parse_snapshot_delete(const MeshBackend *be, MeshOpState *st,
												 const MeshHttpResponse *resp, void *out,
												 MeshError *err);	/* none */
extern MeshStepResult mesh_parse_snapshot_list(const MeshBackend *be, MeshOpState *st,
											   const MeshHttpResponse *resp, void *out,
											   MeshError *err);	/* MeshSnapshotListing */

typedef struct MeshDriverRun
{
	const MeshBackend *be;
	MeshOpState st;				/* the driver's state, zeroed by mesh_run_begin */
	MeshResponseParser parse;
	void	   *out;
	size_t		max_response;
	MeshTransfer *transfer;		/* the request in flight; NULL when none */
	MeshTransfer *last;			/* the last answered request: results may point into its body */
	MeshHttpResponse resp;		/* the last response */
	bool		active;			/* started and its end not yet taken by mesh_run_step */
	MeshStepResult result;		/* MESH_STEP_DONE or MESH_STEP_FAILED once ended */
	MeshError	err;			/* why it failed (the builder's reason, or the parser's) */
} MeshDriverRun;

extern MeshOpState *mesh_run_begin(MeshDriverRun *run, const MeshBackend *be);
extern void mesh_run_start(MeshDriverRun *run, bool built, const MeshHttpRequest *first,
						   MeshResponseParser parse, void *out, size_t max_response);
extern bool mesh_run_ready(const MeshDriverRun *run);
extern bool mesh_run_step(MeshDriverRun *run);
extern MeshStepResult mesh_run_until(MeshDriverRun *run, TimestampTz deadline);
extern void mesh_run_end(MeshDriverRun *run);

#endif							/* MESH_RUNNER_H */
