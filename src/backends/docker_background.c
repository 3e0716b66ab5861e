/*-------------------------------------------------------------------------
 *
 * docker_background.c
 *	  The scripts the docker driver runs in a container (an ordinary exec's
 *	  wrapper and a background command's), and the reader of a background
 *	  command's output script's answer.
 *
 * The Engine API cannot follow a process it did not attach to, and this
 * transport cannot hijack an exec's connection, so a background command is
 * supervised from inside its container: a detached exec runs a wrapper
 * that spools both streams whole into the command's record (docker.h),
 * enforces its timeout and writes its end; later execs read the record
 * from byte offsets, signal the command's process group, and remove the
 * record.  Everything here uses the C library alone (see docker.h for
 * why); the scripts need the same busybox applets as the driver's others.
 *
 * Each script takes its arguments after "mesh" ($0), validated by the
 * driver: the key matches docker_exec_key_valid, a signal
 * docker_signal_valid, numbers are decimal.
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "backends/docker.h"

/*
 * Shell functions the scripts that look at a record share: st PID prints
 * the start time of a live process (field 22 of /proc/PID/stat; "sh" has no
 * space in its name), so alive tells the record's own wrapper from a
 * process that took its pid after a container restart; unstarted: claimed
 * a minute ago and still no wrapper (a start takes a few requests).
 */
#define BG_FUNCTIONS \
"st() { local l; read -r l <\"/proc/$1/stat\" && set -- $l && echo \"${22}\"; } 2>/dev/null\n" \
"alive() { local p s; read -r p s _ <\"$d/wrapper\" 2>/dev/null && [ \"$(st \"$p\")\" = \"$s\" ]; }\n" \
"unstarted() { local c u; [ ! -f \"$d/wrapper\" ] && read -r c <\"$d/claimed\" && read -r u _ </proc/uptime &&\n" \
"  [ \"${u%.*}\" -gt $((${c%.*} + 60)) ]; } 2>/dev/null\n"

/*
 * An ordinary exec, run attached: $1 key, $2 timeout (seconds), $3 the
 * bytes of each stream kept (the last ones), $4 directory, then argv.  As
 * in docker_bg_wrapper, the command runs in the foreground (a job started
 * with & would have SIGINT and SIGQUIT ignored, and a kill call must be
 * able to send them) through a sh that records its pid under the exec's
 * scratch directory and becomes the command in a session of its own, so
 * its process group is its whole tree unless it starts another session;
 * it is killed with that group at the timeout and when it exits.  Only the
 * tail of its output comes back (the watchdog marks the timeout before it
 * kills, so the wrapper cannot miss the mark).  The last bytes of stderr
 * are the trailer "\036mesh:<timed out>:<stdout bytes>:<stderr bytes>",
 * written on descriptor 3, which neither the command nor the watchdog
 * holds; the exit status is the command's.  The shell's own chatter goes
 * to /dev/null.
 */
const char	docker_exec_wrapper[] =
"exec 3>&2 2>/dev/null\n"
"k=$1 s=$2 t=$3 w=$4; shift 4\n"
"d=" DOCKER_SCRATCH "/$k; mkdir -p \"$d\" || exit 125\n"
"i=/dev/null; [ -f \"$d/in\" ] && i=$d/in\n"
"if cd -- \"$w\"; then\n"
"  ( sleep \"$s\" & z=$!; trap 'kill $z; exit 0' TERM; wait $z\n"
"    until [ -s \"$d/pid\" ]; do sleep 0.01; done\n"
"    : >\"$d/timeout\"; kill -KILL -\"$(cat \"$d/pid\")\" ) </dev/null >/dev/null 2>&1 3>&- &\n"
"  g=$!\n"
"  sh -c 'echo $$ >\"$0/pid.new\" && mv \"$0/pid.new\" \"$0/pid\" && exec setsid \"$@\"' \"$d\" \"$@\" <\"$i\" >\"$d/out\" 2>\"$d/err\" 3>&-\n"
"  r=$?\n"
"  kill \"$g\"; [ -s \"$d/pid\" ] && kill -KILL -\"$(cat \"$d/pid\")\"\n"
"else\n"
"  r=1; : >\"$d/out\"; echo \"mesh: no such directory: $w\" >\"$d/err\"\n"
"fi\n"
"e() { tail -c \"$t\" \"$1\"; }\n"
"e \"$d/out\"; e \"$d/err\" >&3\n"
"o=0; [ -e \"$d/timeout\" ] && o=1\n"
"printf '\\036mesh:%d:%d:%d' \"$o\" \"$(wc -c <\"$d/out\")\" \"$(wc -c <\"$d/err\")\" >&3\n"
"rm -rf \"$d\"; exit \"$r\"\n";

/*
 * $1 key: make the record, or say the key is taken ("claimed", "used", or
 * "failed" when the scratch volume cannot be written).  Empty streams exist
 * from here on, so readers never meet a missing file; "claimed" holds the
 * uptime of the claim, so a record whose wrapper never started (its caller
 * died between the claim and the start) is found out.
 */
const char	docker_bg_claim_script[] =
"d=" DOCKER_BG_DIR "/$1\n"
"mkdir -p " DOCKER_BG_DIR " 2>/dev/null\n"
"read -r u _ </proc/uptime\n"
"if mkdir \"$d\" 2>/dev/null; then : >\"$d/out\" && : >\"$d/err\" && echo \"$u\" >\"$d/claimed\" && echo claimed\n"
"elif [ -e \"$d\" ]; then echo used\n"
"else echo failed; fi\n";

/*
 * The supervisor, run by a detached exec: $1 key, $2 timeout (seconds, "0"
 * for none), $3 directory, then argv.  It writes the wrapper file first;
 * the command runs in the foreground (a job started with & would have
 * SIGINT and SIGQUIT ignored, and kill_request must be able to send them)
 * through a sh that records its pid and becomes the command in a session
 * of its own, so its process group is its whole tree unless it starts
 * another session.  The watchdog marks the timeout before it kills; the
 * group is killed again when the command ends.  A kill call's signal is
 * counted as the cause only when the status says the command died of it.
 * Files written by another name and moved are read whole or not at all.
 */
const char	docker_bg_wrapper[] =
"exec </dev/null >/dev/null 2>&1\n"
"k=$1 s=$2 w=$3; shift 3\n"
"d=" DOCKER_BG_DIR "/$k\n"
"st() { local l; read -r l <\"/proc/$1/stat\" && set -- $l && echo \"${22}\"; }\n"
"read -r u _ </proc/uptime\n"
"echo \"$$ $(st $$) $u\" >\"$d/wrapper.new\" && mv \"$d/wrapper.new\" \"$d/wrapper\" || exit 125\n"
"i=/dev/null; [ -f \"$d/in\" ] && i=$d/in\n"
"g=\n"
"if cd -- \"$w\"; then\n"
"  if [ \"$s\" != 0 ]; then\n"
"    ( sleep \"$s\" & z=$!; trap 'kill $z; exit 0' TERM; wait $z\n"
"      until [ -s \"$d/pid\" ]; do sleep 0.01; done\n"
"      : >\"$d/timeout\"; kill -KILL -\"$(cat \"$d/pid\")\" ) &\n"
"    g=$!\n"
"  fi\n"
"  sh -c 'echo $$ >\"$0/pid.new\" && mv \"$0/pid.new\" \"$0/pid\" && exec setsid \"$@\"' \"$d\" \"$@\" <\"$i\" >\"$d/out\" 2>\"$d/err\"\n"
"  r=$?\n"
"  [ -z \"$g\" ] || kill \"$g\"\n"
"  [ -s \"$d/pid\" ] && kill -KILL -\"$(cat \"$d/pid\")\"\n"
"else\n"
"  r=1; echo \"mesh: no such directory: $w\" >\"$d/err\"\n"
"fi\n"
"x=0\n"
"if [ -f \"$d/killed\" ]; then\n"
"  while read -r n; do\n"
"    q=$(kill -l \"$n\"); case $q in ''|*[!0-9]*) continue;; esac\n"
"    [ \"$r\" = $((128 + q)) ] && x=1\n"
"  done <\"$d/killed\"\n"
"fi\n"
"o=0; [ -e \"$d/timeout\" ] && o=1\n"
"read -r v _ </proc/uptime\n"
"set -- $(wc -c \"$d/out\" \"$d/err\")\n"
"echo \"$r $o $x $1 $3 $u $v\" >\"$d/end.new\" && mv \"$d/end.new\" \"$d/end\"\n"
"exit \"$r\"\n";

/*
 * $1 key, $2 and $3 the stdout and stderr offsets, $4 how many looks to
 * wait, $5 the most bytes of each stream.  Waits until either stream has
 * bytes past its offset, the end file appears or the looks run out, by
 * polling the sizes with short sleeps (inotify is not in busybox's
 * guaranteed set, and a look costs two forks).  Then prints one header
 * line, "mesh-bg <stdout size> <stderr size> <stdout from> <stdout bytes>
 * <stderr from> <stderr bytes> <state>" with state "running", "lost" (the
 * wrapper is gone without an end, or never started) or "end" and the end
 * file's fields, and
 * the bytes it announced: stdout's, then stderr's.  A missing record is
 * "mesh-bg missing".  Once ended, sizes count no byte past the totals.
 */
const char	docker_bg_output_script[] =
"k=$1 a=$2 b=$3 n=$4 m=$5\n"
"d=" DOCKER_BG_DIR "/$k\n"
"[ -d \"$d\" ] || { echo 'mesh-bg missing'; exit 0; }\n"
BG_FUNCTIONS
"sizes() { set -- $(wc -c \"$d/out\" \"$d/err\"); o=$1 e=$3; }\n"
"t=0\n"
"while [ ! -f \"$d/end\" ]; do\n"
"  sizes\n"
"  [ \"$o\" -gt \"$a\" ] || [ \"$e\" -gt \"$b\" ] || [ \"$t\" -ge \"$n\" ] && break\n"
"  sleep " DOCKER_BG_POLL "; t=$((t + 1))\n"
"done\n"
"h=running\n"
"if [ -f \"$d/end\" ] || { [ -f \"$d/wrapper\" ] && ! alive; } || unstarted; then\n"
"  h=lost\n"
"  [ -f \"$d/end\" ] && read -r z <\"$d/end\" && h=\"end $z\"\n"
"fi\n"
"sizes\n"
"if [ \"${h%% *}\" = end ]; then set -- $z; [ \"$o\" -gt \"$4\" ] && o=$4; [ \"$e\" -gt \"$5\" ] && e=$5; fi\n"
"ol=$((o - a)); [ \"$ol\" -lt 0 ] && ol=0; [ \"$ol\" -gt \"$m\" ] && ol=$m\n"
"el=$((e - b)); [ \"$el\" -lt 0 ] && el=0; [ \"$el\" -gt \"$m\" ] && el=$m\n"
"printf 'mesh-bg %s %s %s %s %s %s %s\\n' \"$o\" \"$e\" \"$a\" \"$ol\" \"$b\" \"$el\" \"$h\"\n"
"[ \"$ol\" -eq 0 ] || tail -c +$((a + 1)) \"$d/out\" | head -c \"$ol\"\n"
"[ \"$el\" -eq 0 ] || tail -c +$((b + 1)) \"$d/err\" | head -c \"$el\"\n";

/*
 * $1 key: remove the record of a command that is no longer running
 * ("gone"); one whose wrapper is alive is left alone ("running").
 */
const char	docker_bg_forget_script[] =
"d=" DOCKER_BG_DIR "/$1\n"
"[ -d \"$d\" ] || { echo gone; exit 0; }\n"
BG_FUNCTIONS
"if [ ! -f \"$d/end\" ] && alive; then echo running; exit 0; fi\n"
"rm -rf \"$d\" && echo gone\n";

/*
 * $1 key, $2 signal name: signal the process group of the command, a
 * background one (recording the signal first, waiting briefly for a
 * command that is just starting to record its group) or an ordinary
 * exec's (its wrapper records the group in /run/mesh/<key>/pid).  A
 * command that ended, or whose wrapper is gone, is left alone: its
 * recorded group may belong to someone else by now.
 */
const char	docker_kill_script[] =
"d=" DOCKER_BG_DIR "/$1\n"
BG_FUNCTIONS
"if [ -d \"$d\" ]; then\n"
"  i=0\n"
"  while [ ! -s \"$d/pid\" ] && [ ! -f \"$d/end\" ] && [ \"$i\" -lt 100 ]; do sleep 0.02; i=$((i + 1)); done\n"
"  [ ! -f \"$d/end\" ] && [ -s \"$d/pid\" ] && alive || exit 0\n"
"  echo \"$2\" >>\"$d/killed\"\n"
"  kill -\"$2\" -\"$(cat \"$d/pid\")\" 2>/dev/null; exit 0\n"
"fi\n"
"p=$(cat " DOCKER_SCRATCH "/\"$1\"/pid 2>/dev/null) && kill -\"$2\" -\"$p\" 2>/dev/null; exit 0\n";

/*
 * A key names a directory in the record's path: a plain name (letters,
 * digits, "_", "-", "." but not first), at most 64 bytes.
 */
bool
docker_exec_key_valid(const char *key)
{
	size_t		len = key ? strlen(key) : 0;

	if (len == 0 || len > 64 || key[0] == '.')
		return false;
	return strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

/* The signals the contract allows (backend.h, kill_request). */
bool
docker_signal_valid(const char *signal)
{
	static const char *const names[] = {"TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"};

	for (size_t i = 0; signal && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(signal, names[i]) == 0)
			return true;
	return false;
}

/* The next space-separated word of the header, or NULL past its end. */
static const char *
next_word(const char **cursor, const char *end, size_t *len)
{
	const char *p = *cursor;
	const char *w;

	if (p >= end)
		return NULL;
	w = p;
	while (p < end && *p != ' ')
		p++;
	*len = (size_t) (p - w);
	*cursor = p < end ? p + 1 : p;
	return *len ? w : NULL;
}

/* A decimal count: digits only, at most 18 of them (no overflow). */
static bool
word_count(const char **cursor, const char *end, int64_t *value)
{
	size_t		len;
	const char *w = next_word(cursor, end, &len);
	int64_t		v = 0;

	if (w == NULL || len > 18)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (w[i] < '0' || w[i] > '9')
			return false;
		v = v * 10 + (w[i] - '0');
	}
	*value = v;
	return true;
}

/* /proc/uptime's seconds: digits, optionally "." and digits (hundredths). */
static bool
word_seconds(const char **cursor, const char *end, double *value)
{
	size_t		len;
	const char *w = next_word(cursor, end, &len);
	double		v = 0;
	double		scale = 0;

	if (w == NULL || len > 24 || w[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (w[i] == '.' && scale == 0 && i + 1 < len)
			scale = 1;
		else if (w[i] >= '0' && w[i] <= '9')
		{
			if (scale > 0)
				v += (w[i] - '0') * (scale /= 10);
			else
				v = v * 10 + (w[i] - '0');
		}
		else
			return false;
	}
	*value = v;
	return true;
}

/* Whether the word under the cursor is exactly WORD. */
static bool
word_is(const char **cursor, const char *end, const char *word)
{
	size_t		len;
	const char *w = next_word(cursor, end, &len);

	return w != NULL && len == strlen(word) && memcmp(w, word, len) == 0;
}

/* The end file's fields, after "end": status, flags, totals, uptimes. */
static bool
parse_end(const char **cursor, const char *end, DockerBgOutput *out)
{
	int64_t		status;
	int64_t		timed_out;
	int64_t		killed;
	double		began;
	double		ended;

	if (!word_count(cursor, end, &status) || status > 255 ||
		!word_count(cursor, end, &timed_out) || timed_out > 1 ||
		!word_count(cursor, end, &killed) || killed > 1 ||
		!word_count(cursor, end, &out->out_total) ||
		!word_count(cursor, end, &out->err_total) ||
		!word_seconds(cursor, end, &began) || !word_seconds(cursor, end, &ended))
		return false;
	out->exit_code = (int) status;
	out->timed_out = timed_out != 0;
	out->killed = killed != 0;
	out->wall_seconds = ended > began ? ended - began : 0;
	return true;
}

/* One stream's window: its bytes lie within what the spool holds. */
static bool
window_fits(int64_t size, int64_t from, int64_t len)
{
	return len == 0 || (from <= size && len <= size - from);
}

/*
 * Read what the output script printed (its stdout, whole): the header, then
 * exactly the bytes it announced.  False for anything else (a script that
 * died halfway, a record tampered with by the command itself).
 */
bool
docker_bg_output_parse(const char *body, size_t len, DockerBgOutput *out)
{
	const char *nl = body ? memchr(body, '\n', len < 512 ? len : 512) : NULL;
	const char *cursor = body;
	int64_t		out_len;
	int64_t		err_len;
	size_t		size;
	size_t		rest;

	memset(out, 0, sizeof(*out));
	if (nl == NULL || !word_is(&cursor, nl, "mesh-bg"))
		return false;
	if (cursor < nl && nl - cursor == 7 && memcmp(cursor, "missing", 7) == 0)
	{
		out->state = DOCKER_BG_MISSING;
		return (size_t) (nl - body) + 1 == len;
	}
	if (!word_count(&cursor, nl, &out->out_size) || !word_count(&cursor, nl, &out->err_size) ||
		!word_count(&cursor, nl, &out->out_from) || !word_count(&cursor, nl, &out_len) ||
		!word_count(&cursor, nl, &out->err_from) || !word_count(&cursor, nl, &err_len))
		return false;
	size = (size_t) (nl - cursor);
	if (size == 7 && memcmp(cursor, "running", 7) == 0)
		out->state = DOCKER_BG_RUNNING;
	else if (size == 4 && memcmp(cursor, "lost", 4) == 0)
		out->state = DOCKER_BG_LOST;
	else if (word_is(&cursor, nl, "end") && parse_end(&cursor, nl, out) && cursor == nl)
		out->state = DOCKER_BG_ENDED;
	else
		return false;
	if (!window_fits(out->out_size, out->out_from, out_len) ||
		!window_fits(out->err_size, out->err_from, err_len))
		return false;
	rest = len - (size_t) (nl + 1 - body);
	if ((uint64_t) out_len + (uint64_t) err_len != rest)
		return false;
	out->out_data = nl + 1;
	out->out_len = (size_t) out_len;
	out->err_data = nl + 1 + out_len;
	out->err_len = (size_t) err_len;
	return true;
}

/*
 * Whether these bytes are the last the command will have: it ended and
 * nothing is left past them in either stream.
 */
bool
docker_bg_output_reaches_end(const DockerBgOutput *out)
{
	return out->state == DOCKER_BG_ENDED &&
		out->out_from + (int64_t) out->out_len >= out->out_size &&
		out->err_from + (int64_t) out->err_len >= out->err_size;
}
