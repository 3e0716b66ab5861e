/*
 * bg_tool.c - the docker driver's scripts (an exec's wrapper, background commands') and output reader
 * (src/backends/docker_background.c) for shell tests that run them in a real container
 * (test/e2e/docker_background.t), so a test exercises the very bytes the driver sends.
 *
 *   bg_tool script exec|claim|wrapper|output|forget|kill   print that script
 *   bg_tool parse OUT ERR                             read an output script's answer on stdin,
 *       append the bytes it served to files OUT and ERR, print what the reader found as
 *       name=value words; exit 1 when the reader refuses the answer
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/docker.h"

/* stdin whole (malloc'd). */
static char *
slurp(size_t *len)
{
	size_t		cap = 1 << 16;
	char	   *buf = malloc(cap);
	size_t		n;

	*len = 0;
	while ((n = fread(buf + *len, 1, cap - *len, stdin)) > 0)
	{
		*len += n;
		if (*len == cap)
			buf = realloc(buf, cap *= 2);
	}
	return buf;
}

/* Append LEN bytes to the file at PATH. */
static int
append(const char *path, const char *data, size_t len)
{
	FILE	   *f = fopen(path, "ab");
	int			good = f != NULL && fwrite(data, 1, len, f) == len;

	if (f)
		good = (fclose(f) == 0) && good;
	return good;
}

static int
parse(const char *out_path, const char *err_path)
{
	static const char *const states[] = {"missing", "running", "lost", "ended"};
	size_t		len;
	char	   *body = slurp(&len);
	DockerBgOutput o;

	if (!docker_bg_output_parse(body, len, &o))
	{
		printf("invalid\n");
		return 1;
	}
	if (!append(out_path, o.out_data, o.out_len) || !append(err_path, o.err_data, o.err_len))
	{
		perror("bg_tool: append");
		return 2;
	}
	printf("state=%s out_size=%lld err_size=%lld out_from=%lld out_len=%zu err_from=%lld err_len=%zu "
		   "exit=%d timed_out=%d killed=%d out_total=%lld err_total=%lld reaches_end=%d wall=%.2f\n",
		   states[o.state], (long long) o.out_size, (long long) o.err_size,
		   (long long) o.out_from, o.out_len, (long long) o.err_from, o.err_len, o.exit_code,
		   o.timed_out, o.killed, (long long) o.out_total, (long long) o.err_total,
		   docker_bg_output_reaches_end(&o), o.wall_seconds);
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct
	{
		const char *name;
		const char *text;
	}			scripts[] = {
		{"exec", docker_exec_wrapper},
		{"claim", docker_bg_claim_script},
		{"wrapper", docker_bg_wrapper},
		{"output", docker_bg_output_script},
		{"forget", docker_bg_forget_script},
		{"kill", docker_kill_script},
	};

	if (argc == 3 && strcmp(argv[1], "script") == 0)
		for (size_t i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++)
			if (strcmp(argv[2], scripts[i].name) == 0)
				return fputs(scripts[i].text, stdout) == EOF;
	if (argc == 4 && strcmp(argv[1], "parse") == 0)
		return parse(argv[2], argv[3]);
	fprintf(stderr, "usage: bg_tool script exec|claim|wrapper|output|forget|kill | bg_tool parse OUT ERR\n");
	return 2;
}
