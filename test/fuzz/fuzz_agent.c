/*
 * fuzz_agent.c - libFuzzer target for the exec agent's channel (src/sandboxd/agent_proto.c).
 * The first byte picks: 0 a reply as the daemon reads it from inside the sandbox (untrusted),
 * 1 a request header with a descriptor count, 2 a request payload (working directory, argv,
 * envp) with its counts. Checks besides memory errors: an accepted reply has its fields in
 * range; an accepted payload has exactly argc argv and envc envp strings, all inside the
 * input, and a non-empty argv.
 */
#include "agent_proto.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks an accepted payload's shape against its counts and the bytes it came from. */
static void check_payload(const struct agent_payload *p, const char *bytes, size_t len,
                          uint32_t argc, uint32_t envc)
{
    uint32_t n = 0;
    if (p->dir < bytes || p->dir >= bytes + len || !p->argv[0])
        abort();
    for (; p->argv[n]; n++)
        if (p->argv[n] < bytes || p->argv[n] >= bytes + len)
            abort();
    if (n != argc)
        abort();
    for (n = 0; p->envp[n]; n++)
        if (p->envp[n] < bytes || p->envp[n] >= bytes + len)
            abort();
    if (n != envc)
        abort();
}

/* One input, by its first byte. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t kind = data[0] % 3;
    data++;
    size--;
    if (kind == 0) {
        struct agent_reply reply;
        memcpy(&reply, data, size < sizeof reply ? size : sizeof reply);
        if (agent_reply_valid(&reply, size) &&
            (reply.kind < AGENT_DONE || reply.kind > AGENT_FAILED ||
             agent_step_name(reply.failed_step) == NULL))
            abort();
    } else if (kind == 1 && size >= 1) {
        struct agent_request req;
        int nfds = data[0] % (AGENT_MAX_FDS + 2);
        memcpy(&req, data + 1, size - 1 < sizeof req ? size - 1 : sizeof req);
        if (agent_request_valid(&req, size - 1, nfds) &&
            (req.argc < 1 || nfds < AGENT_FIXED_FDS || nfds > AGENT_MAX_FDS))
            abort();
    } else if (kind == 2 && size >= 4) {
        uint32_t argc = data[0] | (uint32_t)data[1] << 8, envc = data[2] | (uint32_t)data[3] << 8;
        size_t len = size - 4;
        char *bytes = malloc(len ? len : 1);
        struct agent_payload p;
        memcpy(bytes, data + 4, len);
        if (agent_payload_parse(bytes, len, argc, envc, &p)) {
            check_payload(&p, bytes, len, argc, envc);
            free(p.argv);
            free(p.envp);
        }
        free(bytes);
    }
    return 0;
}
