/*
 * agent_proto.c - checks of the bytes that cross between the daemon and the exec agent
 * (agent_proto.h). Both binaries link it: the agent checks requests and splits payloads, the
 * daemon checks replies, which come from inside the sandbox and are therefore untrusted.
 * test/fuzz/fuzz_agent.c feeds them arbitrary bytes.
 */
#include "agent_proto.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* True when a message of LEN bytes holds a request of this protocol (with its payload when
 * inline) and came with the NFDS descriptors its flags call for. */
bool agent_request_valid(const struct agent_request *req, size_t len, int nfds)
{
    bool inline_payload = req->flags & AGENT_INLINE;
    return len >= sizeof *req && req->magic == AGENT_MAGIC && req->version == AGENT_PROTOCOL &&
           (req->flags & ~(AGENT_INLINE | AGENT_CPU_GROUP | AGENT_MEMORY_GROUP)) == 0 &&
           req->argc >= 1 && req->argc <= AGENT_MAX_ARGS &&
           req->envc <= AGENT_MAX_ARGS - req->argc && req->payload_len <= AGENT_MAX_PAYLOAD &&
           (inline_payload ? req->payload_len <= AGENT_INLINE_MAX &&
                             len - sizeof *req == req->payload_len
                           : len == sizeof *req) &&
           nfds == agent_request_fds(req);
}

/* How many descriptors a request with these flags carries. */
int agent_request_fds(const struct agent_request *req)
{
    return AGENT_FIXED_FDS + !(req->flags & AGENT_INLINE) + !!(req->flags & AGENT_CPU_GROUP) +
           !!(req->flags & AGENT_MEMORY_GROUP);
}

/* Splits BYTES (LEN of them) into the working directory, ARGC argv and ENVC envp strings,
 * each NUL-terminated, with nothing left over; false for any other shape. On success OUT's
 * arrays are allocated (free argv and envp) and point into BYTES. */
bool agent_payload_parse(char *bytes, size_t len, uint32_t argc, uint32_t envc,
                         struct agent_payload *out)
{
    size_t total = (size_t)argc + envc + 1, seen = 0, pos = 0;
    memset(out, 0, sizeof *out);
    if (argc < 1 || argc > AGENT_MAX_ARGS || envc > AGENT_MAX_ARGS - argc || total > len)
        return false;
    out->argv = calloc((size_t)argc + 1, sizeof(char *));
    out->envp = calloc((size_t)envc + 1, sizeof(char *));
    while (out->argv && out->envp && pos < len && seen < total) {
        char *end = memchr(bytes + pos, '\0', len - pos);
        if (!end)
            break;
        if (seen == 0)
            out->dir = bytes + pos;
        else if (seen <= argc)
            out->argv[seen - 1] = bytes + pos;
        else
            out->envp[seen - 1 - argc] = bytes + pos;
        seen++;
        pos = (size_t)(end - bytes) + 1;
    }
    if (seen == total && pos == len)
        return true;
    free(out->argv);
    free(out->envp);
    memset(out, 0, sizeof *out);
    return false;
}

/* True when LEN bytes hold a reply of this protocol whose fields are in range. */
bool agent_reply_valid(const struct agent_reply *reply, size_t len)
{
    return len == sizeof *reply && reply->magic == AGENT_MAGIC &&
           reply->version == AGENT_PROTOCOL && reply->kind >= AGENT_DONE &&
           reply->kind <= AGENT_FAILED && reply->failed_step < AGENT_STEP_COUNT &&
           reply->failed_errno >= 0 && reply->spawn_errno >= 0 && reply->spawn_errno < 4096 &&
           reply->failed_errno < 4096 && reply->command_done <= 1 && reply->spawn_in_dir <= 1 &&
           reply->cpu_us >= 0;
}

/* The name of a failed step, for the error message. */
const char *agent_step_name(uint32_t step)
{
    static const char *names[AGENT_STEP_COUNT] = {"none", "request", "payload", "memory",
                                                  "clone(init)"};
    return step < AGENT_STEP_COUNT ? names[step] : "unknown";
}

/* Whether SIG is one a kill call may send to a whole exec tree instead of SIGKILL: the signals
 * a command may catch to end cleanly. The same list on both sides of the exec's socket. */
bool agent_signal_forwarded(int sig)
{
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1 ||
           sig == SIGUSR2;
}
