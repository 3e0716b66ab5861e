/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The embedded default: start and supervise mesh-sandboxd.
 *
 * With mesh.embedded_sandboxd = on, this background worker runs the daemon
 * installed next to the postgres binary, on a unix socket in the data
 * directory (mesh_sandboxd/sandboxd.sock), as the database's OS user.  The
 * socket file's permissions are the authentication.  The daemon declares
 * what it cannot enforce as that user.  It enforces the size tiers' limits
 * when root delegated it a cgroup subtree at install time, and it refuses
 * new workspaces whose files would share the data directory's filesystem
 * (--protect-path) until root gave them one of their own: both are what
 * `mesh-sandboxd --setup-host postgres --state-dir $PGDATA/mesh_sandboxd
 * --disk-bytes N` prepares (docs/sandboxd.md).
 *
 * The daemon gets SIGTERM when this worker dies (PR_SET_PDEATHSIG), drains
 * and exits, stopping its sandboxes but keeping their files
 * (--hibernate-on-exit): nothing the server started runs on without it.
 * The next daemon finds them in its state directory, and a run's next call
 * wakes its workspace.  A daemon that exits is restarted with backoff.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "mesh_exec.h"

#define DAEMON_STATE_DIR "mesh_sandboxd"
#define DAEMON_SOCKET "sandboxd.sock"
#define MAX_BACKOFF_MS 30000

/*
 * Start the daemon; returns its pid, or 0 when it could not be forked.
 * With the broker on, its directory is shown inside every sandbox.
 */
static pid_t
spawn_daemon(const char *binary, const char *state_dir, const char *socket_path)
{
	char	   *broker_dir = psprintf("%s/mesh_broker", DataDir);
	pid_t		pid;

	if (mesh_broker_enabled && mkdir(broker_dir, 0755) != 0 && errno != EEXIST)
		ereport(LOG, (errmsg("mesh: could not create %s: %m", broker_dir)));
	pid = fork();

	if (pid < 0)
	{
		ereport(LOG, (errmsg("mesh: could not fork mesh-sandboxd: %m")));
		return 0;
	}
	if (pid == 0)
	{
		/* no sandbox outlives the server: stopping it stops them, keeping their files */
		char	   *argv[] = {"mesh-sandboxd", "--socket", (char *) socket_path,
			"--state-dir", (char *) state_dir, "--hibernate-on-exit",
			"--protect-path", DataDir,
			mesh_broker_enabled ? "--broker-dir" : NULL, broker_dir, NULL};

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(1);			/* the supervisor died before prctl took effect */
		execv(binary, argv);
		fprintf(stderr, "mesh: could not execute %s: %s\n", binary, strerror(errno));
		_exit(127);
	}
	ereport(LOG, (errmsg("mesh: started mesh-sandboxd (pid %d) on %s", (int) pid, socket_path)));
	return pid;
}

/* Ask the daemon to drain and stop; SIGKILL if it takes too long. */
static void
stop_daemon(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 100; i++)
	{
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return;
		pg_usleep(100000L);
	}
	kill(pid, SIGKILL);
	(void) waitpid(pid, NULL, 0);
}

static pid_t daemon_pid = 0;

static void
launcher_on_exit(int code, Datum arg)
{
	stop_daemon(daemon_pid);
}

void
mesh_launcher_main(Datum arg)
{
	char		binary[MAXPGPATH];
	char	   *state_dir;
	char	   *socket_path;
	long		backoff_ms = 1000;
	TimestampTz next_start = 0;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	strlcpy(binary, my_exec_path, MAXPGPATH);
	get_parent_directory(binary);
	strlcat(binary, "/mesh-sandboxd", MAXPGPATH);
	state_dir = psprintf("%s/%s", DataDir, DAEMON_STATE_DIR);
	socket_path = psprintf("%s/%s", state_dir, DAEMON_SOCKET);
	if (mkdir(state_dir, 0700) != 0 && errno != EEXIST)
		ereport(ERROR, (errmsg("mesh: could not create %s: %m", state_dir)));
	if (access(binary, X_OK) != 0)
		ereport(LOG,
				(errmsg("mesh: %s is not installed; the embedded sandbox daemon is not started", binary),
				 errhint("Install mesh_exec with \"make install\", or set mesh.embedded_sandboxd = off.")));
	before_shmem_exit(launcher_on_exit, (Datum) 0);

	while (!ShutdownRequestPending)
	{
		int			status;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (daemon_pid > 0 && waitpid(daemon_pid, &status, WNOHANG) == daemon_pid)
		{
			ereport(LOG,
					(errmsg("mesh: mesh-sandboxd (pid %d) exited with status %d; restarting in %ld ms",
							(int) daemon_pid, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status),
							backoff_ms)));
			daemon_pid = 0;
			next_start = GetCurrentTimestamp() + backoff_ms * 1000;
			backoff_ms = Min(backoff_ms * 2, MAX_BACKOFF_MS);
		}
		if (daemon_pid == 0 && GetCurrentTimestamp() >= next_start && access(binary, X_OK) == 0)
		{
			daemon_pid = spawn_daemon(binary, state_dir, socket_path);
		}
		/* the daemon's exit is noticed within a second; nothing here reads tables */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	/* shutdown: launcher_on_exit stops the daemon */
	proc_exit(0);
}
