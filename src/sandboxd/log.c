/*
 * log.c - one line per event on stderr.
 *
 * Callers never pass the bearer token here; the format is "time mesh-sandboxd: message".
 */
#include "log.h"
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Writes one timestamped line in a single stdio call so lines from threads do not interleave. */
void log_event(const char *fmt, ...)
{
    char line[1024];
    char stamp[32];
    struct timespec now;
    struct tm tm;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ mesh-sandboxd: %s\n", stamp, now.tv_nsec / 1000000, line);
}
