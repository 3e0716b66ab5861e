/*
 * frame_read.c - reads one framed answer of mesh-sandboxd (a file holding the body of an
 * exec's output "tail" answer or of a background exec's output) with the sandboxd driver's
 * own reader (src/backends/sandboxd_parse.c) and prints what the driver would take from it:
 * "frame RAW OUT_LEN ERR_LEN" then, for a background answer, "progress RUNNING STDOUT_FROM
 * STDERR_FROM STDOUT_TOTAL STDERR_TOTAL ERROR_CODE", or "refused" for bytes it does not accept.
 * 18-background.t builds it and feeds it the daemon's real answers.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backends/sandboxd_parse.h"

int main(int argc, char **argv)
{
    static char body[64 << 20];
    SandboxdFrame frame;
    SandboxdProgress p;
    FILE *f = argc == 2 ? fopen(argv[1], "rb") : NULL;
    size_t len = f ? fread(body, 1, sizeof body, f) : 0;

    if (!f)
        return 2;
    fclose(f);
    if (!sandboxd_frame_read(body, len, &frame)) {
        puts("refused");
        return 0;
    }
    printf("frame %d %zu %zu\n", frame.raw, frame.stdout_len, frame.stderr_len);
    if (sandboxd_progress_read(&frame, &p))
        printf("progress %d %lld %lld %lld %lld %s\n", p.running, (long long)p.stdout_from,
               (long long)p.stderr_from, (long long)p.stdout_total, (long long)p.stderr_total,
               p.error_code ? p.error_code : "-");
    else
        puts("progress refused");
    json_decref(frame.doc);
    return 0;
}
