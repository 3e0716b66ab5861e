/*-------------------------------------------------------------------------
 *
 * isolated_launcher.c
 *	  The embedded isolate host: start and supervise mesh-isolated.
 *
 * With mesh.embedded_isolated = on, this background worker runs
 * mesh-isolated (src/isolated/, installed under mesh.isolate_home) on
 * 127.0.0.1:mesh.isolate_port, with the bounds of the mesh.isolate_*
 * settings: isolates at once, memory and CPU time of each evaluation's
 * process.  CREATE EXTENSION registers it as an enabled backend
 * ({"embedded": true}, sql/src/16_eval.sql), whose driver reads the port
 * from the same setting.
 *
 * The host runs in a process group of its own: when it exits (or is
 * killed) this worker kills the whole group, so the evaluation that was in
 * flight (a process the host started, whose wall time only the host
 * watched) and the host's spares go with it; the worker's call sees its
 * connection fail and the exec row says the host went away.  A host that
 * had been up for a while is restarted at once, one that dies soon after
 * its start with backoff (0.1 s doubling to 30 s).  The host gets SIGTERM
 * when this worker dies (PR_SET_PDEATHSIG), and its group SIGKILL when
 * this worker stops it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

#include "settings.h"

#define MAX_BACKOFF_MS 30000
#define SERVED_MS 5000			/* up this long: it had been serving, restart at once */
#define SPARE_PROCESSES "2"

static pid_t host_pid = 0;
static int	host_pidfd = -1;
static TimestampTz host_started = 0;

/* Start the host in a process group of its own; returns its pid, or 0. */
static pid_t
spawn_host(const char *binary)
{
	pid_t		pid = fork();

	if (pid < 0)
	{
		ereport(LOG, (errmsg("mesh: could not fork mesh-isolated: %m")));
		return 0;
	}
	if (pid == 0)
	{
		char		port[16], isolates[16], memory[16], cpu[16];
		char	   *argv[] = {"mesh-isolated", port, isolates, SPARE_PROCESSES, memory, cpu, NULL};

		snprintf(port, sizeof(port), "%d", mesh_isolate_port);
		snprintf(isolates, sizeof(isolates), "%d", mesh_isolate_max_isolates);
		snprintf(memory, sizeof(memory), "%d", mesh_isolate_memory_mb);
		snprintf(cpu, sizeof(cpu), "%d", mesh_isolate_cpu_s);
		/* the runtime's cache is the server's own, not a shared /tmp directory */
		setenv("DENO_DIR", psprintf("%s/mesh_isolated", DataDir), 1);
		/* its own group: this worker kills the host and every evaluation it started at once */
		(void) setsid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(1);
		execv(binary, argv);
		fprintf(stderr, "mesh: could not execute %s: %s\n", binary, strerror(errno));
		_exit(127);
	}
	host_pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
	host_started = GetCurrentTimestamp();
	ereport(LOG, (errmsg("mesh: started mesh-isolated (pid %d) on 127.0.0.1:%d",
						 (int) pid, mesh_isolate_port)));
	return pid;
}

/* The host exited or is being stopped: nothing it started may run on. */
static void
forget_host(void)
{
	if (host_pid > 0)
		(void) kill(-host_pid, SIGKILL);
	if (host_pidfd >= 0)
		close(host_pidfd);
	host_pidfd = -1;
	host_pid = 0;
}

/* Whatever ends this worker, the host and its evaluations end with it. */
static void
isolated_launcher_on_exit(int code, Datum arg)
{
	if (host_pid > 0)
	{
		(void) kill(-host_pid, SIGKILL);
		(void) waitpid(host_pid, NULL, 0);
	}
	forget_host();
}

/* SIGCHLD: the loop reaps the host. */
static void
handle_sigchld(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

/* a background worker's entry point, named in its registration (mesh_exec.c) */
PGDLLEXPORT void mesh_isolated_launcher_main(Datum arg);

void
mesh_isolated_launcher_main(Datum arg)
{
	char	   *binary = psprintf("%s/mesh-isolated", mesh_isolate_home);
	long		backoff_ms = 0;
	TimestampTz next_start = 0;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGCHLD, handle_sigchld);
	BackgroundWorkerUnblockSignals();
	before_shmem_exit(isolated_launcher_on_exit, (Datum) 0);
	if (access(binary, X_OK) != 0)
		ereport(LOG,
				(errmsg("mesh: %s is not installed; the embedded isolate host is not started", binary),
				 errhint("Install it with src/isolated/install.sh, or set mesh.embedded_isolated = off.")));

	while (!ShutdownRequestPending)
	{
		int			status;
		long		timeout = -1;
		int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (host_pid > 0 && waitpid(host_pid, &status, WNOHANG) == host_pid)
		{
			bool		served = GetCurrentTimestamp() - host_started >= SERVED_MS * 1000L;

			backoff_ms = served ? 0 : Min(Max(backoff_ms * 2, 100), MAX_BACKOFF_MS);
			ereport(LOG,
					(errmsg("mesh: mesh-isolated (pid %d) exited with status %d; restarting in %ld ms",
							(int) host_pid, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status),
							backoff_ms)));
			forget_host();
			next_start = GetCurrentTimestamp() + backoff_ms * 1000;
		}
		if (host_pid == 0 && access(binary, X_OK) == 0)
		{
			if (GetCurrentTimestamp() >= next_start)
				host_pid = spawn_host(binary);
			if (host_pid == 0)
				timeout = next_start > GetCurrentTimestamp() ?
					Max((long) ((next_start - GetCurrentTimestamp()) / 1000), 1L) : 1000L;
		}
		else if (host_pid == 0)
			timeout = 10000;	/* not installed: look again now and then */
		if (timeout >= 0)
			events |= WL_TIMEOUT;
		if (host_pidfd >= 0)
			events |= WL_SOCKET_READABLE;
		(void) WaitLatchOrSocket(MyLatch, events, host_pidfd >= 0 ? host_pidfd : PGINVALID_SOCKET,
								 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	proc_exit(0);
}
