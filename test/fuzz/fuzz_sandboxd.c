/*
 * fuzz_sandboxd.c - libFuzzer target for the sandboxd driver's reader of framed exec answers
 * (src/backends/sandboxd_parse.c: jansson only, so it builds without PostgreSQL): an exec's
 * output "tail" answer and a background exec's output, one JSON line then raw stdout and
 * stderr bytes. Besides memory errors and leaks: an accepted frame's streams lie inside the
 * input right after the line, exactly as long as announced; an accepted progress never puts
 * bytes past a stream's total, and an error end is never "running".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/sandboxd_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Both readers on one input, and the properties of what they accept. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    SandboxdFrame frame;
    SandboxdProgress progress;

    if (!sandboxd_frame_read(body, size, &frame))
        return 0;
    if (frame.raw) {
        const char *newline = memchr(body, '\n', size);
        if (!newline || frame.stdout_data != newline + 1 ||
            frame.stderr_data != frame.stdout_data + frame.stdout_len ||
            frame.stderr_data + frame.stderr_len != body + size)
            abort();
    }
    if (sandboxd_progress_read(&frame, &progress)) {
        if (!frame.raw || progress.stdout_from < 0 || progress.stderr_from < 0 ||
            (uint64_t)progress.stdout_from + frame.stdout_len > (uint64_t)progress.stdout_total ||
            (uint64_t)progress.stderr_from + frame.stderr_len > (uint64_t)progress.stderr_total ||
            (progress.error_code && (progress.running || !progress.error_message)))
            abort();
    }
    json_decref(frame.doc);
    return 0;
}
