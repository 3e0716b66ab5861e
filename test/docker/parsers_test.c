/*
 * parsers_test.c - unit tests of the docker driver's reader of its output script's answers
 * and of its key and signal checks (src/backends/docker_background.c), as TAP.
 * Built and run by test/e2e/docker_parsers.t: cc -I src ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/docker.h"

static int n;
static int failed;

/* One TAP line. */
static void
ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

/* The reader on LEN bytes of TEXT (which may hold NULs). */
static int
parse(const char *text, size_t len, DockerBgOutput *out)
{
	return docker_bg_output_parse(text, len, out);
}

#define PARSE(lit, out) parse((lit), sizeof(lit) - 1, (out))

/* Answers the reader must refuse, each for one reason. */
static void
refusals(void)
{
	static const struct
	{
		const char *text;
		const char *why;
	}			bad[] = {
		{"", "an empty answer"},
		{"mesh-bg 1 0 0 1 0 0 running", "a header without its newline"},
		{"mesh-bg 1 0 0 1 0 0 running\n", "fewer bytes than announced"},
		{"mesh-bg 1 0 0 1 0 0 running\nab", "more bytes than announced"},
		{"mesh-bg 5 0 3 5 0 0 running\nabcde", "a window past what the spool holds"},
		{"mesh-bg -1 0 0 0 0 0 running\n", "a negative size"},
		{"mesh-bg 1234567890123456789 0 0 0 0 0 running\n", "a count of 19 digits"},
		{"mesh-bg 0 0 0 0 0 0 sleeping\n", "an unknown state"},
		{"mesh-bg 0 0 0 0 0  running\n", "a missing field (two spaces)"},
		{"mesh-bg 0 0 0 0 0 0 running \n", "a trailing space"},
		{"mesh-bg 0 0 0 0 0 0\n", "no state"},
		{"mesh-bg 0 0 0 0 0 0 end 256 0 0 0 0 1 2\n", "an exit status over 255"},
		{"mesh-bg 0 0 0 0 0 0 end 0 2 0 0 0 1 2\n", "a timed-out flag that is not 0 or 1"},
		{"mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 1\n", "an end without its last uptime"},
		{"mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 1 2 3\n", "an end with a field too many"},
		{"mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 .5 2\n", "an uptime without its integer part"},
		{"mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 1. 2\n", "an uptime ending in a point"},
		{"mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 1.2.3 4\n", "an uptime with two points"},
		{"mesh-bg missing\nx", "bytes after a missing record"},
		{"mesh-bgx missing\n", "another first word"},
		{"Error: No such container\n", "the daemon's own words"},
	};
	DockerBgOutput o;
	char		buf[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		snprintf(buf, sizeof(buf), "refused: %s", bad[i].why);
		ok(!parse(bad[i].text, strlen(bad[i].text), &o), buf);
	}
	{
		/* a header longer than the reader looks for its newline */
		char		long_header[700];

		memset(long_header, '0', sizeof(long_header));
		memcpy(long_header, "mesh-bg 0 0 0 0 0 0 running ", 28);
		long_header[sizeof(long_header) - 1] = '\n';
		ok(!parse(long_header, sizeof(long_header), &o), "refused: a header over 512 bytes");
	}
}

int
main(void)
{
	DockerBgOutput o;

	/* running, bytes as written: NUL and bytes that are not UTF-8 */
	ok(PARSE("mesh-bg 9 6 2 5 1 3 running\na\0b\xff\n" "e\0\xfe", &o), "a running answer is read");
	ok(o.state == DOCKER_BG_RUNNING && o.out_size == 9 && o.err_size == 6 && o.out_from == 2 &&
	   o.err_from == 1, "its state, sizes and offsets");
	ok(o.out_len == 5 && memcmp(o.out_data, "a\0b\xff\n", 5) == 0, "stdout's bytes, NUL and 0xff included");
	ok(o.err_len == 3 && memcmp(o.err_data, "e\0\xfe", 3) == 0, "stderr's bytes follow stdout's");
	ok(!docker_bg_output_reaches_end(&o), "a running command has not reached its end");

	/* ended, everything served */
	ok(PARSE("mesh-bg 5 0 0 5 0 0 end 3 0 1 5 0 100.50 102.75\nhello", &o), "an ended answer is read");
	ok(o.state == DOCKER_BG_ENDED && o.exit_code == 3 && !o.timed_out && o.killed &&
	   o.out_total == 5 && o.err_total == 0, "its end: exit status, flags, totals");
	ok(o.wall_seconds > 2.24 && o.wall_seconds < 2.26, "its wall time from the two uptimes");
	ok(docker_bg_output_reaches_end(&o), "the bytes reach both totals: ended");

	/* ended, but more bytes than this answer carried */
	ok(PARSE("mesh-bg 10 4 0 5 0 4 end 0 1 0 10 4 1 2\nhelloerrs", &o) && o.timed_out,
	   "an ended answer with bytes left is read");
	ok(!docker_bg_output_reaches_end(&o), "bytes left in a stream: not yet ended");

	/* offsets past the end of an ended command */
	ok(PARSE("mesh-bg 5 0 9 0 7 0 end 0 0 0 5 0 1 2\n", &o) && o.out_from == 9 && o.out_len == 0,
	   "offsets past the end are served as nothing, from where they were asked");
	ok(docker_bg_output_reaches_end(&o), "and end the command (no endless asking)");

	ok(PARSE("mesh-bg missing\n", &o) && o.state == DOCKER_BG_MISSING, "a missing record");
	ok(PARSE("mesh-bg 3 0 0 3 0 0 lost\nabc", &o) && o.state == DOCKER_BG_LOST && o.out_len == 3,
	   "a command whose wrapper is gone");
	ok(!docker_bg_output_reaches_end(&o), "a lost command has no end");
	ok(PARSE("mesh-bg 0 0 0 0 0 0 end 0 0 0 0 0 52431 52432\n", &o) && o.wall_seconds == 1,
	   "uptimes without hundredths");

	refusals();

	ok(docker_exec_key_valid("42") && docker_exec_key_valid("a-b_c.d"), "plain keys are valid");
	ok(!docker_exec_key_valid("") && !docker_exec_key_valid(NULL), "an empty key is not");
	ok(!docker_exec_key_valid(".") && !docker_exec_key_valid("..") && !docker_exec_key_valid(".x"),
	   "a key starting with a point is not");
	ok(!docker_exec_key_valid("../x") && !docker_exec_key_valid("a/b") &&
	   !docker_exec_key_valid("a b") && !docker_exec_key_valid("a;b"),
	   "a key with a slash, space or shell character is not");
	ok(docker_exec_key_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") &&
	   !docker_exec_key_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
	   "64 bytes is the longest key");
	ok(docker_signal_valid("TERM") && docker_signal_valid("INT") && docker_signal_valid("HUP") &&
	   docker_signal_valid("QUIT") && docker_signal_valid("USR1") && docker_signal_valid("USR2") &&
	   docker_signal_valid("KILL"), "the contract's seven signals are valid");
	ok(!docker_signal_valid("SIGTERM") && !docker_signal_valid("term") &&
	   !docker_signal_valid("STOP") && !docker_signal_valid("9") && !docker_signal_valid(NULL),
	   "other names, numbers and NULL are not");

	printf("1..%d\n", n);
	return failed != 0;
}
