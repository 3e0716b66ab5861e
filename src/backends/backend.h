/*-------------------------------------------------------------------------
 *
 * backend.h
 *	  The backend contract: what every execution backend implements.
 *
 * The contract is the small intersection every backend can serve: acquire a
 * workspace, exec in it, read and write a file, release it (plus the kill of
 * a running exec, and a list call for reconciliation).  Everything else is a
 * declared capability.  Drivers do no I/O: each operation is a pair of pure
 * functions, one that builds an HTTP request and one that parses the
 * response, so the driver runner (src/runner.c) owns all waiting,
 * cancellation and connection reuse, and drivers can be tested without a
 * network.  A builder may refuse (a request the backend could not serve,
 * such as a path outside the workspace): it returns false with the reason,
 * and the operation fails without a request.
 *
 * Nothing outside src/backends/ may name a driver; code above this layer
 * asks the driver table for capabilities and never compares names.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_BACKEND_H
#define MESH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mesh_json.h"

/* Vendor-neutral workspace sizes, smallest first; drivers map them to units. */
typedef enum MeshSize
{
	MESH_SIZE_SMALL = 0,
	MESH_SIZE_STANDARD,
	MESH_SIZE_LARGE,
	MESH_SIZE_XLARGE
} MeshSize;

extern const char *mesh_size_name(MeshSize size);
extern bool mesh_size_parse(const char *name, MeshSize *size);

/* What a backend can enforce.  The layer above routes and refuses by these. */
typedef struct MeshCapabilities
{
	bool		shell;
	bool		resource_limits;
	bool		compute_metering;
	bool		egress_control;
	bool		disk_limits;	/* workspace files cannot fill the host's filesystem */
	bool		disk_quota;		/* nor, each by its tier, each other's */
	bool		snapshot;
	bool		hibernate;
	bool		caller_chosen_id;
	bool		seccomp;		/* workspace processes run under a system-call filter */
	bool		background;		/* commands keep running between calls (mesh_exec_start) */
	bool		eval;			/* evaluates a JavaScript snippet in an isolate (mesh_eval) */
	bool		extend_timeout; /* a running exec's deadline moves later (mesh_exec_extend) */
} MeshCapabilities;

extern char *mesh_capabilities_text(const MeshCapabilities *caps);
extern void mesh_capabilities_parse(const char *text, MeshCapabilities *caps);

/* A catalog entry resolved for one operation. */
typedef struct MeshBackend
{
	const struct MeshDriver *driver;
	const char *name;			/* catalog name: used in messages only */
	json_t	   *config;			/* validated driver config */
	const char *credential;		/* NULL when none is set; never logged */
	const char *data_dir;		/* the cluster's data directory */
} MeshBackend;

#define MESH_HTTP_MAX_HEADERS 4

/* An HTTP request built by a driver; the worker performs it. */
typedef struct MeshHttpRequest
{
	const char *method;
	char	   *url;
	char	   *unix_socket;	/* NULL for TCP */
	const char *ca_pem;			/* PEM bundle trusted for https instead of the system's; NULL: system */
	char	   *headers[MESH_HTTP_MAX_HEADERS];
	int			nheaders;
	const char *body;
	size_t		body_len;
	long		timeout_ms;		/* transport deadline for the whole request */
} MeshHttpRequest;

/* What came back.  transport_error is set when no HTTP status was received. */
typedef struct MeshHttpResponse
{
	long		status;
	const char *body;
	size_t		body_len;
	const char *transport_error;
	bool		too_large;		/* the response exceeded the operation's limit */
	bool		out_of_descriptors; /* the worker had no descriptor left for the socket */
} MeshHttpResponse;

/*
 * Failure classes a driver reports.  The worker maps them to SQLSTATEs, so
 * the error a harness sees never depends on which backend produced it.
 */
typedef enum MeshFailure
{
	MESH_FAIL_NOT_FOUND = 1,		/* file or workspace does not exist */
	MESH_FAIL_PATH_REFUSED,		/* path escapes the workspace */
	MESH_FAIL_TOO_LARGE,		/* over a size limit */
	MESH_FAIL_BAD_REQUEST,		/* the backend refused the input */
	MESH_FAIL_NOT_RUNNING,		/* workspace exists but is not running */
	MESH_FAIL_NO_RESOURCES,		/* the backend's host lacks (or will not risk) a resource:
								 * HTTP 507, e.g. no bounded disk for workspaces; or it
								 * has no room now: 503 out_of_resources, 429 */
	MESH_FAIL_UNAVAILABLE,		/* cannot reach the backend */
	MESH_FAIL_PROTOCOL,			/* an answer the driver cannot understand */
	MESH_FAIL_PERMISSION,		/* the workspace's file modes forbid it */
	MESH_FAIL_NAME_TOO_LONG,	/* a name in a path is over the filesystem's limit */
	MESH_FAIL_ARGS_TOO_LONG,	/* argv + environment over the kernel's exec limit */
	MESH_FAIL_RELEASE_INCOMPLETE	/* processes gone, files not all removed: retry */
} MeshFailure;

typedef struct MeshError
{
	MeshFailure failure;
	char	   *message;		/* human text, never containing a credential */
	char	   *reason;			/* the backend's own words, when it answered with an error */
	char	   *code;			/* the backend's error code ({"error":{"code"}}), else NULL */
} MeshError;

/* What acquire is asked for, on a create and on a wake alike. */
typedef struct MeshAcquireSpec
{
	MeshSize	size;
	const char *install_id;		/* labels the sandbox as this install's, for list */
	/*
	 * The workspace's network policy captured at creation
	 * (mesh.workspace_egress), JSON text {"mode": "open"|"allowlist",
	 * "domains": [...], "enforced": bool}; NULL: no network at all.
	 */
	const char *egress;
	/*
	 * The snapshot a new workspace's /workspace starts from, as a
	 * copy-on-write view (its external_ref in mesh.snapshots); NULL: empty.
	 * Creation-time, like the network: a wake keeps the workspace's view.
	 */
	const char *snapshot;
} MeshAcquireSpec;

typedef struct MeshExecSpec
{
	const char *const *argv;
	int			argc;
	const char *dir;			/* NULL: the workspace root */
	json_t	   *env;			/* object of string values, or NULL */
	const char *stdin_data;		/* NULL: no stdin */
	size_t		stdin_len;
	long		timeout_ms;
	const char *exec_key;		/* the caller's name for the exec, for kill */
	long		max_output_bytes;	/* per stream, the most recent bytes are kept */
	bool		background;		/* start it and answer at once (exec_start_response); its
								 * output and end come through exec_output */
	bool		eval;			/* an evaluation (mesh_eval): argv is [language, code], stdin
								 * the input as JSON; only backends declaring eval get one */
	const char *egress;			/* the workspace's captured network policy (as in
								 * MeshAcquireSpec), for a backend that enforces it per exec */
} MeshExecSpec;

/*
 * What an exec produced.  Each stream holds its last spec->max_output_bytes
 * bytes as the command wrote them (NUL and invalid UTF-8 included, no
 * marker); *_total counts every byte written, so what came before the kept
 * bytes is *_total - *_len.  The worker clamps for people and stores whole.
 * The streams may point into the response body the parser was given (no
 * copy of a large output): the worker is done with them before the run's
 * response is freed.
 */

typedef struct MeshExecResult
{
	int			exit_code;
	char	   *stdout_data;
	size_t		stdout_len;
	char	   *stderr_data;
	size_t		stderr_len;
	int64_t		stdout_total;
	int64_t		stderr_total;
	bool		truncated;		/* bytes were dropped before the kept ones */
	bool		timed_out;
	bool		oom_killed;
	bool		killed;
	bool		disk_quota;		/* the workspace was at its disk quota at the end */
	double		wall_seconds;
	double		cpu_seconds;
	bool		cpu_metered;	/* false: cpu_seconds is not measured */
	int64_t		memory_peak_bytes;	/* the workspace's peak memory during the exec */
	bool		memory_peak_known;	/* false: the backend did not report it */
	/*
	 * Outbound connections the backend refused during this exec, as JSON
	 * text: [{"host", "port", "reason", "at"}], palloc'd; NULL when none
	 * (or the backend does not report them).
	 */
	char	   *egress_denials;
} MeshExecResult;

/*
 * What a background command produced from the byte offsets asked for.
 * The bytes may point into the response body.  *_from is where they start
 * in their stream: the offset asked for, unless the backend no longer held
 * it (then the first byte it still had; the bytes between were lost).
 * ended: the command has ended and these bytes reach the end of both
 * streams; result then holds the end (exit code, flags, metering, totals;
 * its stream fields are unused).  A command that ended but still has bytes
 * past these comes back with ended false, to be asked again at once.
 */
typedef struct MeshExecProgress
{
	const char *stdout_data;
	size_t		stdout_len;
	int64_t		stdout_from;
	const char *stderr_data;
	size_t		stderr_len;
	int64_t		stderr_from;
	bool		ended;
	MeshExecResult result;
} MeshExecProgress;

/*
 * What an exec_output call asks for: the bytes of each stream from *_from
 * on, at most max_bytes per stream, waiting up to wait_ms for a byte past
 * them or for the end.  Bytes before *_kept are the caller's own from then
 * on (stored for good) and the backend may drop them; the caller may ask
 * again for bytes between *_kept and *_from (it held them back), so
 * *_kept <= *_from.
 */
typedef struct MeshOutputAsk
{
	int64_t		stdout_from;
	int64_t		stderr_from;
	int64_t		stdout_kept;
	int64_t		stderr_kept;
	long		wait_ms;
	size_t		max_bytes;
} MeshOutputAsk;

typedef enum MeshReleaseOutcome
{
	MESH_RELEASE_DESTROYED,
	MESH_RELEASE_HIBERNATED
} MeshReleaseOutcome;

/* One workspace as the backend's list call reports it. */
typedef struct MeshListedWorkspace
{
	char	   *ref;
	bool		running;
} MeshListedWorkspace;

/* A snapshot as its capture or the backend's list reports it. */
typedef struct MeshSnapshotInfo
{
	char	   *ref;
	bool		ready;			/* false: still being captured */
	int64_t		size_bytes;
	int64_t		file_count;
} MeshSnapshotInfo;

/*
 * How a response parser ends a step.  MESH_STEP_NEXT: the operation needs
 * another request, which the parser put in st->next; the runner performs it
 * and calls the same parser again.  So multi-step operations (create, then
 * start, then inspect) are small state machines inside the driver, while
 * the runner still owns every wait.
 */
typedef enum MeshStepResult
{
	MESH_STEP_DONE,
	MESH_STEP_NEXT,
	MESH_STEP_FAILED
} MeshStepResult;

/* One operation in progress, zeroed before its first request. */
typedef struct MeshOpState
{
	int			step;			/* responses parsed so far */
	void	   *data;			/* the driver's own, palloc'd */
	MeshHttpRequest next;		/* filled when a parser returns MESH_STEP_NEXT */
} MeshOpState;

typedef struct MeshDriver
{
	const char *name;

	/* NULL if config is acceptable, else "field: what is wrong". */
	const char *(*validate_config) (json_t *config);

	/* Whether this config talks to the backend with a credential. */
	bool		(*needs_credential) (json_t *config);

	/* What the backend is declared to enforce before it is asked. */
	void		(*declared_capabilities) (const MeshBackend *be, MeshCapabilities *caps);

	/*
	 * The opaque reference of a new workspace, decided before the backend is
	 * called so the row can record it first (caller-chosen identities).
	 */
	char	   *(*workspace_ref) (const MeshBackend *be, const char *install_id,
								  int64_t workspace_id);

	/*
	 * Each operation: a request builder, which returns false (the reason in
	 * err) when it cannot build the request, and a response parser.
	 */

	/* create or wake; the backend may refine the capabilities */
	bool		(*acquire_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
									const MeshAcquireSpec *spec, MeshHttpRequest *req,
									MeshError *err);
	MeshStepResult (*acquire_response) (const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp,
										MeshCapabilities *caps, MeshError *err);

	bool		(*exec_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
								 const MeshExecSpec *spec, MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*exec_response) (const MeshBackend *be, MeshOpState *st,
									 const MeshHttpResponse *resp,
									 MeshExecResult *result, MeshError *err);

	/*
	 * Signal the whole process tree of a running exec: SIGNAL is a name
	 * without "SIG" (TERM, INT, HUP, QUIT, USR1, USR2, KILL); NULL means
	 * KILL.  A command that already ended is success.
	 */
	bool		(*kill_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
								 const char *exec_key, const char *signal,
								 MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*kill_response) (const MeshBackend *be, MeshOpState *st,
									 const MeshHttpResponse *resp, MeshError *err);

	/*
	 * Move the deadline of a running exec BY_MS later: only drivers whose
	 * backends may declare the "extend_timeout" capability set these; the
	 * others leave them NULL.  The response's failure is MESH_FAIL_NOT_FOUND
	 * for an exec the backend does not run (unknown, or ended); on success
	 * *TIMEOUT_MS is the exec's whole timeout as the backend now has it (-1:
	 * not reported).
	 */
	bool		(*extend_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
								   const char *exec_key, int64_t by_ms,
								   MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*extend_response) (const MeshBackend *be, MeshOpState *st,
									   const MeshHttpResponse *resp, int64_t *timeout_ms,
									   MeshError *err);

	bool		(*read_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
								 const char *path, MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*read_response) (const MeshBackend *be, MeshOpState *st,
									 const MeshHttpResponse *resp,
									 const char **data, size_t *len, MeshError *err);

	bool		(*write_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
								  const char *path, int mode, const char *data, size_t len,
								  MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*write_response) (const MeshBackend *be, MeshOpState *st,
									  const MeshHttpResponse *resp, MeshError *err);

	/*
	 * Background commands: only drivers whose backends may declare the
	 * "background" capability set these; the others leave them NULL.
	 * exec_request with spec->background starts the command (exec_key names
	 * it from then on) and exec_start_response takes the backend's word
	 * that it runs.  exec_output asks for what it wrote from the given byte
	 * offsets on (MeshOutputAsk).  exec_forget
	 * lets the backend drop an ended command's record once its end is
	 * stored (one already gone is success).
	 */
	MeshStepResult (*exec_start_response) (const MeshBackend *be, MeshOpState *st,
										   const MeshHttpResponse *resp, MeshError *err);
	bool		(*exec_output_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
										const char *exec_key, const MeshOutputAsk *ask,
										MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*exec_output_response) (const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp,
											MeshExecProgress *progress, MeshError *err);
	bool		(*exec_forget_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
										const char *exec_key, MeshHttpRequest *req,
										MeshError *err);
	MeshStepResult (*exec_forget_response) (const MeshBackend *be, MeshOpState *st,
											const MeshHttpResponse *resp, MeshError *err);

	/* prefer_hibernate: keep the filesystem where the backend can (idle reaping) */
	bool		(*release_request) (const MeshBackend *be, MeshOpState *st, const char *ref,
									bool prefer_hibernate, MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*release_response) (const MeshBackend *be, MeshOpState *st,
										const MeshHttpResponse *resp,
										MeshReleaseOutcome *outcome, MeshError *err);

	/* the backend's own list of this install's workspaces, for reconciliation */
	bool		(*list_request) (const MeshBackend *be, MeshOpState *st, const char *install_id,
								 MeshHttpRequest *req, MeshError *err);
	MeshStepResult (*list_response) (const MeshBackend *be, MeshOpState *st,
									 const MeshHttpResponse *resp,
									 MeshListedWorkspace **items, int *nitems, MeshError *err);

	/*
	 * Project-state snapshots: only drivers whose backends may declare the
	 * "snapshot" capability set these; the others leave them NULL.  A
	 * snapshot holds a workspace's /workspace, never its base image.
	 * snapshot_ref: the opaque name of a new snapshot, decided before the
	 * backend is called (recorded first).  capture: workspace REF's
	 * /workspace as snapshot SNAP_REF while the run keeps working.  delete:
	 * a snapshot that is already gone is success.  list: this install's
	 * snapshots on this backend, for reconciliation.
	 */
	char	   *(*snapshot_ref) (const MeshBackend *be, const char *install_id,
								 int64_t snapshot_id);
	bool		(*snapshot_capture_request) (const MeshBackend *be, MeshOpState *st,
											 const char *snap_ref, const char *ref,
											 const char *install_id, MeshHttpRequest *req,
											 MeshError *err);
	MeshStepResult (*snapshot_capture_response) (const MeshBackend *be, MeshOpState *st,
												 const MeshHttpResponse *resp,
												 MeshSnapshotInfo *info, MeshError *err);
	bool		(*snapshot_delete_request) (const MeshBackend *be, MeshOpState *st,
											const char *snap_ref, MeshHttpRequest *req,
											MeshError *err);
	MeshStepResult (*snapshot_delete_response) (const MeshBackend *be, MeshOpState *st,
												const MeshHttpResponse *resp, MeshError *err);
	bool		(*snapshot_list_request) (const MeshBackend *be, MeshOpState *st,
										  const char *install_id, MeshHttpRequest *req,
										  MeshError *err);
	MeshStepResult (*snapshot_list_response) (const MeshBackend *be, MeshOpState *st,
											  const MeshHttpResponse *resp,
											  MeshSnapshotInfo **items, int *nitems,
											  MeshError *err);
} MeshDriver;

/* src/backends/registry.c */
extern const MeshDriver *mesh_driver_lookup(const char *name);

/* Shared helpers for drivers (registry.c), so each driver stays small. */
extern char *mesh_workspace_ref(const MeshBackend *be, const char *install_id,
								int64_t workspace_id);
extern void mesh_http_add_header(MeshHttpRequest *req, const char *fmt,...);
extern void mesh_http_json_body(MeshHttpRequest *req, json_t *body);
extern void mesh_http_json_body_b64(MeshHttpRequest *req, json_t *body, const char *field,
									const char *data, size_t len);
extern char *mesh_url_encode(const char *s);
extern bool mesh_http_error_from_json(const MeshHttpResponse *resp, const char *backend,
									  MeshError *err);
extern MeshStepResult mesh_step(bool ok);
extern void mesh_error_set(MeshError *err, MeshFailure failure, const char *fmt,...);
extern MeshFailure mesh_failure_for_http_status(long status);
extern bool mesh_acquire_without_snapshot(const MeshBackend *be, const MeshAcquireSpec *spec,
										  MeshError *err);
extern bool mesh_base64_decode(const char *text, char **out, size_t *outlen);

#endif							/* MESH_BACKEND_H */
