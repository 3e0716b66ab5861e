/*
 * bench/forkexec.c: the baseline every mesh_exec figure is compared with.
 *
 *   forkexec ITERATIONS [PROCESSES]
 *
 * Each process forks, execs /bin/true and waits, ITERATIONS times.  Prints
 * the median latency of one fork+exec+wait in ms, and the aggregate rate of
 * all processes per second.  No sandbox, no HTTP: the floor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
	double		x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

/* One fork+exec+wait of /bin/true; returns its latency in ms. */
static double
one_run(void)
{
	double		start = now_ms();
	pid_t		pid = fork();

	if (pid == 0)
	{
		execl("/bin/true", "true", (char *) NULL);
		_exit(127);
	}
	waitpid(pid, NULL, 0);
	return now_ms() - start;
}

int
main(int argc, char **argv)
{
	int			iterations = argc > 1 ? atoi(argv[1]) : 1000;
	int			processes = argc > 2 ? atoi(argv[2]) : 1;
	double	   *lat = mmap(NULL, sizeof(double) * iterations * processes, PROT_READ | PROT_WRITE,
						   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double		start = now_ms();
	double		elapsed;

	for (int p = 0; p < processes; p++)
	{
		if (fork() == 0)
		{
			for (int i = 0; i < iterations; i++)
				lat[p * iterations + i] = one_run();
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	elapsed = now_ms() - start;
	qsort(lat, (size_t) iterations * processes, sizeof(double), cmp_double);
	printf("median_ms %.4f rate_per_s %.1f\n", lat[iterations * processes / 2],
		   iterations * processes / (elapsed / 1000.0));
	return 0;
}
