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
 * The daemon gets SIGTERM when this worker dies (PR_SET_PDEATHSIG), kills
 * the commands in flight, and exits, stopping its sandboxes but keeping
 * their files (--hibernate-on-exit): nothing the server started runs on
 * without it.  The next daemon finds them in its state directory, and a
 * run's next call wakes its workspace.  A daemon that exits is restarted at
 * once if it had been serving, else with backoff.
 *
 * The daemon tells this worker when it serves requests (--ready-fd); until
 * then calls wait for it (mesh_wait_for_embedded_daemon).  Its exit is seen
 * at once through a pidfd, or SIGCHLD setting the latch: nothing polls.  At a shutdown this worker waits (boundedly) for
 * the daemon's drain; when the postmaster died it does not wait at all, so
 * nothing keeps the old server's shared memory in use and a crashed server
 * can be started again at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "handoff.h"
#include "settings.h"

#define DAEMON_STATE_DIR "mesh_sandboxd"
#define DAEMON_SOCKET "sandboxd.sock"
#define MAX_BACKOFF_MS 30000
#define DRAIN_WAIT_MS 10000

/* The daemon this worker supervises, while it runs. */
static pid_t daemon_pid = 0;
static int	daemon_pidfd = -1;		/* readable once it exits */
static int	ready_fd = -1;			/* its --ready-fd pipe, until it said ready */

/*
 * Start the daemon; returns its pid, or 0 when it could not be forked.
 * With the broker on, its directory is shown inside every sandbox.  The
 * daemon writes a line to the ready pipe once it serves requests.
 */
static pid_t
spawn_daemon(const char *binary, const char *state_dir, const char *socket_path)
{
	char	   *broker_dir = psprintf("%s/mesh_broker", DataDir);
	int			ready[2];
	pid_t		pid;

	if (mesh_broker_enabled && mkdir(broker_dir, 0755) != 0 && errno != EEXIST)
		ereport(LOG, (errmsg("mesh: could not create %s: %m", broker_dir)));
	if (pipe2(ready, O_CLOEXEC) != 0)
	{
		ereport(LOG, (errmsg("mesh: could not create a pipe for mesh-sandboxd: %m")));
		return 0;
	}
	pid = fork();

	if (pid < 0)
	{
		ereport(LOG, (errmsg("mesh: could not fork mesh-sandboxd: %m")));
		close(ready[0]);
		close(ready[1]);
		return 0;
	}
	if (pid == 0)
	{
		/* no sandbox outlives the server: stopping it stops them, keeping their files */
		char		fd_text[16];
		char		standby_text[16];
		char	   *argv[] = {"mesh-sandboxd", "--socket", (char *) socket_path,
			"--state-dir", (char *) state_dir, "--hibernate-on-exit", "--ready-fd", fd_text,
			"--protect-path", DataDir, "--standby", standby_text,
			mesh_broker_enabled ? "--broker-dir" : NULL, broker_dir, NULL};

		snprintf(fd_text, sizeof(fd_text), "%d", ready[1]);
		snprintf(standby_text, sizeof(standby_text), "%d", mesh_embedded_standby);
		(void) fcntl(ready[1], F_SETFD, 0);
		/*
		 * Its own session: the postmaster signals each child's process group,
		 * and a SIGQUIT (immediate shutdown, crash restart) would kill the
		 * daemon before it could hibernate.  Only this worker signals it.
		 */
		(void) setsid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(1);			/* the supervisor died before prctl took effect */
		execv(binary, argv);
		fprintf(stderr, "mesh: could not execute %s: %s\n", binary, strerror(errno));
		_exit(127);
	}
	close(ready[1]);
	ready_fd = ready[0];
	mesh_set_daemon_state(MESH_DAEMON_STARTING);
	daemon_pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
	ereport(LOG, (errmsg("mesh: started mesh-sandboxd (pid %d) on %s", (int) pid, socket_path)));
	return pid;
}

/* Forget the daemon's descriptors (it exited, or is being stopped). */
static void
close_daemon_fds(void)
{
	if (daemon_pidfd >= 0)
		close(daemon_pidfd);
	if (ready_fd >= 0)
		close(ready_fd);
	daemon_pidfd = ready_fd = -1;
}

/*
 * Ask the daemon to drain and stop (it kills commands in flight and
 * hibernates its workspaces).  Waits for it, boundedly, only while the
 * postmaster lives: after a crash the daemon stops on its own, and waiting
 * here would keep the old shared memory attached and refuse a restart.
 */
static void
stop_daemon(void)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DRAIN_WAIT_MS);

	if (daemon_pid <= 0)
		return;
	kill(daemon_pid, SIGTERM);
	while (PostmasterIsAlive() && waitpid(daemon_pid, NULL, WNOHANG) == 0)
	{
		long		left = (long) ((deadline - GetCurrentTimestamp()) / 1000);

		if (left <= 0)
		{
			ereport(LOG, (errmsg("mesh: mesh-sandboxd (pid %d) did not stop within %d ms; killing it",
								 (int) daemon_pid, DRAIN_WAIT_MS)));
			kill(daemon_pid, SIGKILL);
			(void) waitpid(daemon_pid, NULL, 0);
			break;
		}
		/* the pidfd is readable once the daemon exits, and SIGCHLD sets the latch */
		(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH |
								 (daemon_pidfd >= 0 ? WL_SOCKET_READABLE : 0),
								 daemon_pidfd >= 0 ? daemon_pidfd : PGINVALID_SOCKET,
								 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	close_daemon_fds();
	daemon_pid = 0;
}

/* Whatever ends this worker, calls stop waiting for a daemon and the daemon stops. */
static void
launcher_on_exit(int code, Datum arg)
{
	mesh_set_daemon_state(MESH_DAEMON_ABSENT);
	stop_daemon();
}

/* The daemon's ready line arrived (or the pipe closed: it exited first). */
static void
read_ready_line(void)
{
	char		buf[16];
	ssize_t		n = read(ready_fd, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0)
		mesh_set_daemon_state(MESH_DAEMON_READY);
	close(ready_fd);
	ready_fd = -1;
}

/*
 * Sleep until something happens: the latch, the daemon's ready line or its
 * exit, the backoff's end, or the postmaster's death (which exits).
 */
static void
wait_for_event(long timeout_ms)
{
	WaitEventSet *set = CreateWaitEventSet(CurrentMemoryContext, 4);
	WaitEvent	events[4];
	int			n;

	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (daemon_pidfd >= 0)
		AddWaitEventToSet(set, WL_SOCKET_READABLE, daemon_pidfd, NULL, NULL);
	if (ready_fd >= 0)
		AddWaitEventToSet(set, WL_SOCKET_READABLE, ready_fd, NULL, NULL);
	n = WaitEventSetWait(set, timeout_ms, events, lengthof(events), PG_WAIT_EXTENSION);
	FreeWaitEventSet(set);
	for (int i = 0; i < n; i++)
		if (events[i].fd == ready_fd && ready_fd >= 0)
			read_ready_line();
	ResetLatch(MyLatch);
}

/* A child (the daemon) exited: the loop reaps it, whether or not a pidfd told it. */
static void
handle_sigchld(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

/* a background worker's entry point, named in its registration (mesh_exec.c) */
PGDLLEXPORT void mesh_launcher_main(Datum arg);

void
mesh_launcher_main(Datum arg)
{
	char		binary[MAXPGPATH];
	char	   *state_dir;
	char	   *socket_path;
	long		backoff_ms = 0;
	TimestampTz next_start = 0;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGCHLD, handle_sigchld);
	BackgroundWorkerUnblockSignals();

	strlcpy(binary, my_exec_path, MAXPGPATH);
	get_parent_directory(binary);
	strlcat(binary, "/mesh-sandboxd", MAXPGPATH);
	state_dir = psprintf("%s/%s", DataDir, DAEMON_STATE_DIR);
	socket_path = psprintf("%s/%s", state_dir, DAEMON_SOCKET);
	if (mkdir(state_dir, 0700) != 0 && errno != EEXIST)
		ereport(ERROR, (errmsg("mesh: could not create %s: %m", state_dir)));
	if (access(binary, X_OK) != 0)
	{
		ereport(LOG,
				(errmsg("mesh: %s is not installed; the embedded sandbox daemon is not started", binary),
				 errhint("Install mesh_exec with \"make install\", or set mesh.embedded_sandboxd = off.")));
		mesh_set_daemon_state(MESH_DAEMON_ABSENT);
	}
	before_shmem_exit(launcher_on_exit, (Datum) 0);

	while (!ShutdownRequestPending)
	{
		int			status;
		long		timeout = -1;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (daemon_pid > 0 && waitpid(daemon_pid, &status, WNOHANG) == daemon_pid)
		{
			bool		was_ready = pg_atomic_read_u32(&mesh_shared->daemon_state) == MESH_DAEMON_READY;

			/* one that had been serving comes back at once; one that cannot start, with backoff */
			backoff_ms = was_ready ? 0 : Min(Max(backoff_ms * 2, 1000), MAX_BACKOFF_MS);
			ereport(LOG,
					(errmsg("mesh: mesh-sandboxd (pid %d) exited with status %d; restarting in %ld ms",
							(int) daemon_pid, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status),
							backoff_ms)));
			close_daemon_fds();
			daemon_pid = 0;
			next_start = GetCurrentTimestamp() + backoff_ms * 1000;
			mesh_set_daemon_state(MESH_DAEMON_STARTING);
		}
		if (daemon_pid == 0 && access(binary, X_OK) == 0)
		{
			if (GetCurrentTimestamp() >= next_start)
				daemon_pid = spawn_daemon(binary, state_dir, socket_path);
			if (daemon_pid == 0)	/* the backoff's end, or a second try after a failed fork */
				timeout = next_start > GetCurrentTimestamp() ?
					Max((long) ((next_start - GetCurrentTimestamp()) / 1000), 1L) : 1000L;
		}
		wait_for_event(timeout);
	}
	/* shutdown: launcher_on_exit stops the daemon */
	proc_exit(0);
}
