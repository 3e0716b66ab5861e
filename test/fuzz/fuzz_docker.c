/*
 * fuzz_docker.c - libFuzzer target for the docker driver's reader of what its output script
 * prints in a container (src/backends/docker_background.c: C library only, so it builds
 * without PostgreSQL), and its key and signal checks.  Besides memory errors and UB: an
 * accepted answer's bytes lie inside the input, exactly after its header, within what the
 * spool holds; its state is one of four; an accepted key is a plain name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/docker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The properties of an answer the reader accepted. */
static void
check_accepted(const char *text, size_t size, const DockerBgOutput *o)
{
    const char *end = text + size;

    if (o->state > DOCKER_BG_ENDED)
        abort();
    if (o->state == DOCKER_BG_MISSING)
        return;
    if (o->out_data < text || o->out_data + o->out_len != o->err_data ||
        o->err_data + o->err_len != end || o->out_data[-1] != '\n')
        abort();
    if ((o->out_len && (uint64_t) o->out_from + o->out_len > (uint64_t) o->out_size) ||
        (o->err_len && (uint64_t) o->err_from + o->err_len > (uint64_t) o->err_size))
        abort();
    if (o->state == DOCKER_BG_ENDED && (o->exit_code < 0 || o->exit_code > 255 || o->wall_seconds < 0))
        abort();
    if (docker_bg_output_reaches_end(o) && o->state != DOCKER_BG_ENDED)
        abort();
}

/* The input as an answer, and as a key and a signal name. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    DockerBgOutput o;
    char *name = malloc(size + 1);

    if (docker_bg_output_parse(text, size, &o))
        check_accepted(text, size, &o);
    memcpy(name, data, size);
    name[size] = '\0';
    if (docker_exec_key_valid(name) &&
        (name[0] == '.' || strchr(name, '/') || strchr(name, ' ') || strlen(name) > 64))
        abort();
    docker_signal_valid(name);
    free(name);
    return 0;
}
