/*-------------------------------------------------------------------------
 *
 * runner.c
 *	  The one driver runner: every backend call goes through here.
 *
 * Drivers do no I/O (backend.h): an operation is a request builder and a
 * response parser that may ask for another request.  This file drives such
 * an operation to its end over the process's HTTP engine (worker_http.c),
 * in one of two ways:
 *
 *	- stepwise, for the worker's pool: the worker starts a run, and whenever
 *	  mesh_run_ready() says its request was answered, mesh_run_step() parses
 *	  the response and sends the next request, or ends the run; the worker
 *	  overlaps the waits of all its calls in its own loop;
 *	- against a deadline, for the reaper, recovery and a worker's exit:
 *	  mesh_run_until() waits on the latch and curl's sockets until the run
 *	  ends or the deadline passes (then the run fails as unanswered).
 *
 * A builder that cannot build the request (a reason the backend would
 * refuse anyway) ends the run as failed before anything is sent.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "runner.h"

/*--------------------------------------------------------------------------
 * The contract's parsers, each behind the runner's one parser type
 *--------------------------------------------------------------------------
 */

MeshStepResult
mesh_parse_acquire(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   void *out, MeshError *err)
{
	return be->driver->acquire_response(be, st, resp, (MeshCapabilities *) out, err);
}

MeshStepResult
mesh_parse_exec(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				void *out, MeshError *err)
{
	return be->driver->exec_response(be, st, resp, (MeshExecResult *) out, err);
}

MeshStepResult
mesh_parse_kill(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				void *out, MeshError *err)
{
	return be->driver->kill_response(be, st, resp, err);
}

MeshStepResult
mesh_parse_extend(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				  void *out, MeshError *err)
{
	return be->driver->extend_response(be, st, resp, (int64_t *) out, err);
}

MeshStepResult
mesh_parse_exec_start(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					  void *out, MeshError *err)
{
	return be->driver->exec_start_response(be, st, resp, err);
}

MeshStepResult
mesh_parse_exec_output(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   void *out, MeshError *err)
{
	return be->driver->exec_output_response(be, st, resp, (MeshExecProgress *) out, err);
}

MeshStepResult
mesh_parse_exec_forget(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
					   void *out, MeshError *err)
{
	return be->driver->exec_forget_response(be, st, resp, err);
}

MeshStepResult
mesh_parse_read(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				void *out, MeshError *err)
{
	MeshFileData *file = (MeshFileData *) out;

	return be->driver->read_response(be, st, resp, &file->data, &file->len, err);
}

MeshStepResult
mesh_parse_write(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				 void *out, MeshError *err)
{
	return be->driver->write_response(be, st, resp, err);
}

MeshStepResult
mesh_parse_release(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				   void *out, MeshError *err)
{
	return be->driver->release_response(be, st, resp, (MeshReleaseOutcome *) out, err);
}

MeshStepResult
mesh_parse_list(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
				void *out, MeshError *err)
{
	MeshListing *listing = (MeshListing *) out;

	return be->driver->list_response(be, st, resp, &listing->items, &listing->nitems, err);
}

MeshStepResult
mesh_parse_snapshot_capture(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
							void *out, MeshError *err)
{
	return be->driver->snapshot_capture_response(be, st, resp, (MeshSnapshotInfo *) out, err);
}

MeshStepResult
mesh_parse_snapshot_delete(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						   void *out, MeshError *err)
{
	return be->driver->snapshot_delete_response(be, st, resp, err);
}

MeshStepResult
mesh_parse_snapshot_list(const MeshBackend *be, MeshOpState *st, const MeshHttpResponse *resp,
						 void *out, MeshError *err)
{
	MeshSnapshotListing *listing = (MeshSnapshotListing *) out;

	return be->driver->snapshot_list_response(be, st, resp, &listing->items, &listing->nitems,
											  err);
}

/*--------------------------------------------------------------------------
 * Runs
 *--------------------------------------------------------------------------
 */

/* Free what the run's transfers hold; the run can begin again. */
void
mesh_run_end(MeshDriverRun *run)
{
	if (run->transfer)
		mesh_http_free(run->transfer);
	if (run->last)
		mesh_http_free(run->last);
	run->transfer = run->last = NULL;
	run->active = false;
}

/*
 * Begin a new operation on backend be: what the previous one held is freed
 * (a request still in flight is abandoned) and the driver's state is fresh.
 * Returns that state, for the operation's request builder.
 */
MeshOpState *
mesh_run_begin(MeshDriverRun *run, const MeshBackend *be)
{
	mesh_run_end(run);
	memset(run, 0, sizeof(*run));
	run->be = be;
	return &run->st;
}

/*
 * Start the operation with its first request, as its builder made it; with
 * built false the builder refused (its reason in run->err) and the run ends
 * failed at its first step, without a request.
 */
void
mesh_run_start(MeshDriverRun *run, bool built, const MeshHttpRequest *first,
			   MeshResponseParser parse, void *out, size_t max_response)
{
	run->parse = parse;
	run->out = out;
	run->max_response = max_response;
	run->active = true;
	run->result = MESH_STEP_NEXT;
	if (!built)
	{
		run->result = MESH_STEP_FAILED;
		if (run->err.message == NULL)
			mesh_error_set(&run->err, MESH_FAIL_BAD_REQUEST, "the backend's driver could not build the request");
		return;
	}
	run->transfer = mesh_http_start(first, max_response);
}

/* Whether mesh_run_step has something to do: a response arrived, or the run ended. */
bool
mesh_run_ready(const MeshDriverRun *run)
{
	return run->active &&
		(run->transfer == NULL || mesh_http_is_done(run->transfer));
}

/*
 * Take the answered request's response to the parser.  Returns true when the
 * run ended (run->result says how); false when the parser asked for another
 * request, now on its way.
 */
bool
mesh_run_step(MeshDriverRun *run)
{
	MeshStepResult r;

	Assert(mesh_run_ready(run));
	if (run->transfer == NULL)
	{
		run->active = false;	/* the builder refused: result and err are set */
		return true;
	}
	if (run->last)
		mesh_http_free(run->last);
	run->last = run->transfer;
	run->transfer = NULL;
	mesh_http_response(run->last, &run->resp);
	r = run->parse(run->be, &run->st, &run->resp, run->out, &run->err);
	if (r == MESH_STEP_NEXT)
	{
		run->st.step++;
		run->transfer = mesh_http_start(&run->st.next, run->max_response);
		return false;
	}
	run->result = r;
	run->active = false;
	return true;
}

/*
 * Drive the run to its end, waiting on the latch and curl's sockets, at
 * most until deadline: a run still going then is abandoned and fails as
 * unanswered.  Also used while the process exits (a worker killing the
 * commands it ran), where interrupts are not serviced and the postmaster's
 * death only ends the wait.
 */
MeshStepResult
mesh_run_until(MeshDriverRun *run, TimestampTz deadline)
{
	while (run->active)
	{
		long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);
		long		timeout = mesh_http_timeout();
		int			rc;

		mesh_http_drive();
		if (mesh_run_ready(run))
		{
			(void) mesh_run_step(run);
			continue;
		}
		if (left <= 0)
		{
			mesh_run_end(run);
			run->result = MESH_STEP_FAILED;
			mesh_error_set(&run->err, MESH_FAIL_UNAVAILABLE,
						   "backend \"%s\" did not answer before the deadline", run->be->name);
			break;
		}
		rc = WaitLatchOrSocket(MyLatch,
							   WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_POSTMASTER_DEATH,
							   mesh_http_socket(), timeout < 0 ? left : Min(timeout, left),
							   PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (rc & WL_POSTMASTER_DEATH)
		{
			if (!proc_exit_inprogress)
				proc_exit(1);
			deadline = 0;		/* exiting already: give up at the next turn */
		}
		if (!proc_exit_inprogress)
			CHECK_FOR_INTERRUPTS();
	}
	return run->result;
}
