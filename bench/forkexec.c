/*
 * bench/forkexec.c: the baselines every mesh_exec figure is compared with.
 *
 *   forkexec [-u UID] [-i FD=FILE] [-o FILE] [-g MS] ITERATIONS [PROCESSES] [-- PROGRAM [ARG...]]
 *
 * Each of PROCESSES processes forks, execs PROGRAM (default /bin/true) and
 * waits, ITERATIONS times; with -u the child becomes UID (and its gid) first,
 * as mesh-sandboxd's holder child does before it execs bwrap; with -i it
 * opens FILE (read-only) as descriptor FD first, afresh for each run, so
 * PROGRAM can read it whole every time (bwrap's --seccomp FD).  Prints
 *
 *   median_ms M rate_per_s R p99_ms P cpu_ms C
 *
 * the median and 99th percentile latency of one fork+exec+wait, the aggregate
 * rate of all processes per second, and the CPU time (user + system, of every
 * process involved) per run.  No sandbox, no HTTP: the floor.  Exits 1 when a
 * run of PROGRAM fails.  With -o, every latency (ms, one a line) is also
 * appended to FILE, so that several interleaved rounds can be summed up.
 * With -g, each run comes MS milliseconds after the last one ended: the
 * baseline of an exec after an idle moment (caches gone cold, CPUs asleep),
 * whose rate means nothing.
 */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* What each child sets up before it execs the program. */
typedef struct ChildSetup
{
	int			uid;			/* -1: stay who we are */
	int			input_fd;		/* -1: none */
	const char *input_file;
} ChildSetup;

/*
 * One fork+exec+wait of ARGV after SETUP; returns its latency in ms, or -1
 * when the program did not exit 0.
 */
static double
one_run(char **argv, const ChildSetup *setup)
{
	double		start = now_ms();
	pid_t		pid = fork();
	int			status = 0;

	if (pid == 0)
	{
		int			uid = setup->uid;

		if (setup->input_fd >= 0)
		{
			int			fd = open(setup->input_file, O_RDONLY);

			if (fd < 0 || dup2(fd, setup->input_fd) < 0)
				_exit(126);
			if (fd != setup->input_fd)
				close(fd);
		}
		if (uid >= 0 &&
			(setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? now_ms() - start : -1;
}

/* CPU seconds (user + system) of the reaped children of this process. */
static double
children_cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_CHILDREN, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
		(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
}

/* Appends N latencies to PATH, one a line; false on an error. */
static int
append_samples(const char *path, const double *lat, size_t n)
{
	FILE	   *f = fopen(path, "a");

	if (!f)
		return 0;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%.4f\n", lat[i]);
	return fclose(f) == 0;
}

int
main(int argc, char **argv)
{
	static char *default_argv[] = {"/bin/true", NULL};
	char	  **program = default_argv;
	ChildSetup	setup = {-1, -1, NULL};
	const char *samples_file = NULL;
	int			pause_ms = 0;
	int			iterations;
	int			processes = 1;
	size_t		runs;
	double	   *lat;
	double		start;
	double		elapsed;
	int			failed = 0;
	int			arg = 1;

	for (; arg + 1 < argc && argv[arg][0] == '-' && argv[arg][1] != '-'; arg += 2)
	{
		char	   *eq = strchr(argv[arg + 1], '=');

		if (strcmp(argv[arg], "-u") == 0)
			setup.uid = atoi(argv[arg + 1]);
		else if (strcmp(argv[arg], "-o") == 0)
			samples_file = argv[arg + 1];
		else if (strcmp(argv[arg], "-g") == 0)
			pause_ms = atoi(argv[arg + 1]);
		else if (strcmp(argv[arg], "-i") == 0 && eq)
		{
			setup.input_fd = atoi(argv[arg + 1]);
			setup.input_file = eq + 1;
		}
		else
			break;
	}
	if (arg >= argc || argv[arg][0] == '-')
	{
		fprintf(stderr, "usage: forkexec [-u UID] [-i FD=FILE] [-o FILE] [-g MS] ITERATIONS [PROCESSES] [-- PROGRAM [ARG...]]\n");
		return 2;
	}
	iterations = atoi(argv[arg++]);
	if (arg < argc && strcmp(argv[arg], "--") != 0)
		processes = atoi(argv[arg++]);
	if (arg + 1 < argc && strcmp(argv[arg], "--") == 0)
		program = argv + arg + 1;
	if (iterations < 1 || processes < 1)
	{
		fprintf(stderr, "forkexec: ITERATIONS and PROCESSES must be positive\n");
		return 2;
	}
	runs = (size_t) iterations * processes;
	lat = mmap(NULL, sizeof(double) * runs, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (lat == MAP_FAILED)
	{
		perror("forkexec: mmap");
		return 2;
	}

	start = now_ms();
	for (int p = 0; p < processes; p++)
	{
		if (fork() == 0)
		{
			for (int i = 0; i < iterations; i++)
			{
				if (pause_ms > 0)
					usleep((useconds_t) pause_ms * 1000);
				lat[p * iterations + i] = one_run(program, &setup);
			}
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	elapsed = now_ms() - start;
	for (size_t i = 0; i < runs; i++)
		failed += lat[i] < 0;
	if (failed)
	{
		fprintf(stderr, "forkexec: %d of %zu runs of %s failed\n", failed, runs, program[0]);
		return 1;
	}
	if (samples_file && !append_samples(samples_file, lat, runs))
	{
		perror("forkexec: cannot append the samples");
		return 2;
	}
	qsort(lat, runs, sizeof(double), cmp_double);
	printf("median_ms %.4f rate_per_s %.1f p99_ms %.4f cpu_ms %.4f\n",
		   lat[runs / 2], runs / (elapsed / 1000.0),
		   lat[(size_t) ((runs - 1) * 0.99)], children_cpu_ms() / runs);
	return 0;
}
