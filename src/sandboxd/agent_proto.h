/*
 * agent_proto.h - the messages between mesh-sandboxd and the exec agent (agent.c), the
 * resident process inside every workspace sandbox that starts its commands.
 *
 * The channel is a SOCK_SEQPACKET socket pair the agent creates when it starts; it keeps both
 * ends at fixed descriptor numbers and the daemon takes a copy of the sending end with
 * pidfd_getfd (at holder start and again when a restarted daemon adopts the holder). Nothing
 * inside the sandbox can reach it: it has no name, the agent is not dumpable and holds a
 * capability the commands lack (so neither ptrace nor pidfd_getfd reaches its descriptors),
 * and the commands run in pid namespaces below the agent's, where it has no pid.
 *
 * One exec: the daemon sends an agent_request with descriptors (SCM_RIGHTS, in this order):
 * the exec's own socket, stdin, stdout, stderr, a memfd with the payload unless it follows the
 * request in the same message (AGENT_INLINE, up to AGENT_INLINE_MAX bytes), and the exec's own
 * cpuacct and memory groups' cgroup.procs when the flags say so. The payload is the working
 * directory, argv and envp as NUL-terminated strings, in that order. The agent answers on the
 * exec's socket once, when the exec's init is reaped (AGENT_DONE) or when the exec could not
 * be started (AGENT_FAILED); the socket closing before that means the agent is gone. The
 * daemon ends an exec (timeout, kill call, release) by writing AGENT_KILL_BYTE (or any byte that
 * is not a forwarded signal) to the exec's socket, or by closing it: the agent then SIGKILLs
 * the exec's init, which ends the whole tree. A byte holding the number of a forwarded signal
 * (agent_signal_forwarded: TERM, INT, HUP, QUIT, USR1, USR2) is a kill call's gentler signal:
 * the agent sends it to the exec's init, which sends it on to every process of the exec's pid
 * namespace (kill(-1, sig)); the command may then exit by itself.
 */
#ifndef MESH_AGENT_PROTO_H
#define MESH_AGENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_MAGIC 0x6d657368u          /* "mesh" */
#define AGENT_PROTOCOL 1
#define AGENT_RECEIVE_FD 10               /* the agent reads requests here */
#define AGENT_CONTROL_FD 11               /* the sending end the daemon copies */
#define AGENT_MAX_ARGS (1u << 20)         /* strings in one payload, argv and envp together */
#define AGENT_MAX_PAYLOAD (256u << 20)    /* bytes in one payload */
#define AGENT_INLINE_MAX (32u << 10)      /* bytes of payload sent inside the request */
#define AGENT_KILL_BYTE 'K'               /* written to an exec's socket: SIGKILL its tree */

enum agent_request_flags {
    AGENT_INLINE = 1,                     /* the payload follows the request, no memfd */
    AGENT_CPU_GROUP = 2,                  /* a cpuacct group's cgroup.procs comes next */
    AGENT_MEMORY_GROUP = 4                /* a memory group's cgroup.procs comes last */
};

/* Fixed descriptors of every request, before the optional ones. */
enum agent_request_fd { AGENT_FD_REPLY, AGENT_FD_STDIN, AGENT_FD_STDOUT, AGENT_FD_STDERR,
                        AGENT_FIXED_FDS };
#define AGENT_MAX_FDS (AGENT_FIXED_FDS + 3)

struct agent_request {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;                       /* enum agent_request_flags */
    uint32_t argc;                        /* argv strings in the payload (at least 1) */
    uint32_t envc;                        /* envp strings after them */
    uint64_t payload_len;                 /* bytes in the payload memfd */
};

enum agent_reply_kind { AGENT_DONE = 1, AGENT_FAILED = 2 };

/* Steps that can fail before the command runs, named in AGENT_FAILED. */
enum agent_step { AGENT_STEP_NONE, AGENT_STEP_REQUEST, AGENT_STEP_PAYLOAD, AGENT_STEP_MEMORY,
                  AGENT_STEP_CLONE, AGENT_STEP_COUNT };

struct agent_reply {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;                        /* enum agent_reply_kind */
    uint32_t failed_step;                 /* enum agent_step (AGENT_FAILED) */
    int32_t failed_errno;
    int32_t init_status;                  /* wait status of the exec's init (AGENT_DONE) */
    int32_t command_status;               /* of the command, when command_done */
    int32_t spawn_errno;                  /* the command never started: why (0 = it started) */
    uint8_t command_done;
    uint8_t spawn_in_dir;                 /* ... because its working directory failed */
    uint8_t reserved[2];
    int64_t cpu_us;                       /* user + system time the init reaped */
};

/* A parsed payload: pointers into the payload's own bytes. */
struct agent_payload {
    const char *dir;
    char **argv;                          /* argc + 1 entries, NULL-terminated */
    char **envp;                          /* envc + 1 entries, NULL-terminated */
};

bool agent_request_valid(const struct agent_request *req, size_t len, int nfds);
int agent_request_fds(const struct agent_request *req);
bool agent_payload_parse(char *bytes, size_t len, uint32_t argc, uint32_t envc,
                         struct agent_payload *out);
bool agent_reply_valid(const struct agent_reply *reply, size_t len);
const char *agent_step_name(uint32_t step);
bool agent_signal_forwarded(int sig);

#endif
