/*
 * egress.c - workspace network access: a filtering HTTP proxy per workspace.
 *
 * A workspace keeps its own network namespace with only a loopback interface, so it has no
 * route anywhere. For network "open" or "allowlist" the daemon creates a listening socket
 * INSIDE that namespace (127.0.0.1:EGRESS_PORT, made by a short-lived helper that joins the
 * namespace) and accepts on it from the host side: the proxy knows which workspace asks
 * because every workspace has its own listener. Clients use it through HTTP_PROXY/HTTPS_PROXY
 * (CONNECT for https, absolute-URI requests for http). The proxy resolves names itself,
 * refuses raw IP destinations in allowlist mode, refuses destinations that are (or resolve
 * to) loopback, private, CGNAT, link-local (169.254.169.254, the cloud metadata service,
 * included), multicast or unspecified addresses, or any address of the host itself (every
 * local interface's, public ones too), in every mode,
 * enforces the allowlist, and records each refusal so the exec that caused it reports it.
 */
#include "egress.h"
#include "config.h"
#include "layout.h"
#include "log.h"
#include "registry.h"
#include "util.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EGRESS_RING 256           /* denials kept per workspace (the newest) */
#define EGRESS_HEAD_MAX 16384     /* a request head larger than this is refused */
#define EGRESS_MAX_CONNS 64       /* concurrent connections per workspace, at most */
#define EGRESS_SURE_CONNS 8       /* connections a workspace always gets, whatever others hold */
#define FD_RESERVE 256            /* descriptors kept for execs, holders and the API */
#define FD_PER_WORKSPACE 16       /* a running workspace's own: namespaces, root, cgroups */
#define EGRESS_IDLE_MS (10 * 60 * 1000)

struct egress_denial {
    uint64_t seq;
    char host[256];
    int port;
    const char *reason;
    struct timespec at;
};

struct egress {
    char ws_id[WORKSPACE_ID_MAX + 1];
    int listen_fd;
    bool allowlist;
    json_t *allow;                /* array of patterns (allowlist mode) */
    pthread_t thread;
    pthread_mutex_t lock;         /* ring, next_seq, conns, refcount */
    struct egress_denial ring[EGRESS_RING];
    uint64_t next_seq;            /* seq of the next denial; the first is 1 */
    int conns;
    int refcount;
};

struct conn {
    struct egress *eg;
    int fd;
};

/* ---- test-only name mapping (--test-resolve NAME=ADDR) ---- */
static json_t *test_names;

/* Registers one --test-resolve mapping; false when malformed. TEST ONLY: lets tests make a
 * name resolve to an address in a network namespace they created, without DNS. */
bool egress_add_test_name(const char *spec)
{
    const char *eq = strchr(spec, '=');
    struct in6_addr a6;
    struct in_addr a4;
    if (!eq || eq == spec || (inet_pton(AF_INET, eq + 1, &a4) != 1 &&
                              inet_pton(AF_INET6, eq + 1, &a6) != 1))
        return false;
    if (!test_names)
        test_names = json_object();
    char *name = strndup(spec, (size_t)(eq - spec));
    json_object_set_new(test_names, name, json_string(eq + 1));
    free(name);
    return true;
}

/* ---- lifetime ---- */

/* Drops one reference; the last frees the proxy state. */
static void egress_put(struct egress *eg)
{
    pthread_mutex_lock(&eg->lock);
    bool last = --eg->refcount == 0;
    pthread_mutex_unlock(&eg->lock);
    if (!last)
        return;
    json_decref(eg->allow);
    pthread_mutex_destroy(&eg->lock);
    free(eg);
}

/* ---- policy ---- */

/* True when HOST (lower case) matches PATTERN: exact, or "*.suffix" for any name strictly
 * below suffix. */
static bool pattern_matches(const char *pattern, const char *host)
{
    if (strncmp(pattern, "*.", 2) != 0)
        return strcmp(pattern, host) == 0;
    size_t hl = strlen(host), sl = strlen(pattern + 1);   /* ".suffix" */
    return hl > sl && strcmp(host + hl - sl, pattern + 1) == 0;
}

/* True when HOST is on the workspace's allowlist. */
static bool host_allowed(struct egress *eg, const char *host)
{
    size_t i;
    json_t *p;
    json_array_foreach(eg->allow, i, p)
        if (json_is_string(p) && pattern_matches(json_string_value(p), host))
            return true;
    return false;
}

/* A valid allowlist entry: lower-case DNS labels, at least two, "*." only as the first, the
 * last starting with a letter (so no IPv4 address passes for a name). */
bool egress_pattern_valid(const char *p)
{
    if (strncmp(p, "*.", 2) == 0)
        p += 2;
    size_t len = strlen(p), label = 0, labels = 1;
    const char *last = strrchr(p, '.');
    if (len == 0 || len > 253 || p[0] == '.' || p[0] == '-' || p[len - 1] == '.' || !last ||
        last[1] < 'a' || last[1] > 'z')
        return false;
    for (const char *c = p; *c; c++) {
        if (*c == '.') {
            if (label == 0 || c[-1] == '-')
                return false;
            labels++;
            label = 0;
        } else if ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-') {
            if (++label > 63 || (label == 1 && *c == '-'))
                return false;
        } else {
            return false;
        }
    }
    return labels >= 2;
}

/* The IPv4 address inside an IPv4-mapped or IPv4-compatible IPv6 address; false for other
 * IPv6 addresses. */
static bool ipv6_embedded_ipv4(const struct in6_addr *a6, uint32_t *a4)
{
    const unsigned char *b = a6->s6_addr;
    static const unsigned char zeros[10] = {0};
    if (memcmp(b, zeros, 10) != 0 || !((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)))
        return false;
    *a4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
    return true;
}

/* True for IPv4 addresses the proxy never connects to: this-network, RFC 1918, CGNAT,
 * loopback, link-local, multicast, reserved and broadcast. */
static bool ipv4_forbidden(uint32_t a)
{
    return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
           (a & 0xffc00000u) == 0x64400000u ||   /* 100.64.0.0/10 */
           (a & 0xffff0000u) == 0xa9fe0000u ||   /* 169.254.0.0/16 */
           (a & 0xfff00000u) == 0xac100000u ||   /* 172.16.0.0/12 */
           (a & 0xffff0000u) == 0xc0a80000u ||   /* 192.168.0.0/16 */
           (a >> 28) >= 14;                      /* multicast, reserved, broadcast */
}

/* True for addresses the proxy never connects to (IPv6: unspecified, loopback, ULA,
 * link-local, multicast, and IPv4-mapped/compatible forms of forbidden IPv4). */
static bool address_forbidden(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ipv4_forbidden(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return true;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    const unsigned char *b = a6->s6_addr;
    uint32_t a4;
    if (ipv6_embedded_ipv4(a6, &a4))
        return ipv4_forbidden(a4);   /* mapped, compat, ::, ::1 */
    return (b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff;
}

/* True when SA is one of this host's own addresses (any interface, any family), read from
 * the kernel at each decision so an address added a moment ago counts too. The proxy
 * connects from the host, so a service on the host's public address would otherwise answer
 * a sandbox as if it were the internet. Fails closed: when the list cannot be read, every
 * destination counts as the host's. */
static bool address_is_host(const struct sockaddr *sa)
{
    struct ifaddrs *list;
    uint32_t want4 = 0;
    bool v4 = sa->sa_family == AF_INET, found = false;
    const struct in6_addr *want6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (v4)
        want4 = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
    else if (sa->sa_family == AF_INET6 && ipv6_embedded_ipv4(want6, &want4))
        v4 = true;
    if (getifaddrs(&list) != 0)
        return true;
    for (struct ifaddrs *i = list; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        if (v4 && i->ifa_addr->sa_family == AF_INET)
            found = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) == want4;
        else if (!v4 && i->ifa_addr->sa_family == AF_INET6)
            found = memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, want6,
                           sizeof *want6) == 0;
    }
    freeifaddrs(list);
    return found;
}

/* True when HOST is an IP address in any numeric form the resolver would accept. */
static bool host_is_ip(const char *host)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    freeaddrinfo(res);
    return true;
}

/* Resolves HOST:PORT (the test map first); NULL when it does not resolve. */
static struct addrinfo *resolve(const char *host, int port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char service[8];
    json_t *mapped = test_names ? json_object_get(test_names, host) : NULL;
    snprintf(service, sizeof service, "%d", port);
    if (mapped)
        hints.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(mapped ? json_string_value(mapped) : host, service, &hints, &res) != 0)
        return NULL;
    return res;
}

/* Records one refusal (the ring keeps the newest EGRESS_RING). */
static void record_denial(struct egress *eg, const char *host, int port, const char *reason)
{
    pthread_mutex_lock(&eg->lock);
    struct egress_denial *d = &eg->ring[eg->next_seq % EGRESS_RING];
    d->seq = ++eg->next_seq;
    snprintf(d->host, sizeof d->host, "%s", host);
    d->port = port;
    d->reason = reason;
    clock_gettime(CLOCK_REALTIME, &d->at);
    pthread_mutex_unlock(&eg->lock);
    /* no host: a name can carry a secret the daemon cannot know to redact; the caller
     * gets it in egress_denials and redacts it there */
    log_event("workspace %s: egress to port %d denied (%s)", eg->ws_id, port, reason);
}

/* Decides HOST:PORT; on allow returns the vetted addresses (connect to these only, never
 * re-resolve), on refusal sets *REASON (a denial) or returns NULL with *REASON NULL when the
 * name does not resolve (not a policy decision). */
static struct addrinfo *decide(struct egress *eg, const char *host, int port, const char **reason)
{
    *reason = NULL;
    bool ip = host_is_ip(host);
    if (ip && eg->allowlist) {
        *reason = "raw_ip";
        return NULL;
    }
    if (!ip && eg->allowlist && !host_allowed(eg, host)) {
        *reason = "not_allowlisted";
        return NULL;
    }
    struct addrinfo *res = resolve(host, port);
    for (struct addrinfo *a = res; a && !*reason; a = a->ai_next)
        *reason = address_forbidden(a->ai_addr) ? "private_address"
                  : address_is_host(a->ai_addr) ? "host_address" : NULL;
    if (*reason) {
        freeaddrinfo(res);
        return NULL;
    }
    return res;
}

/* ---- one proxied connection ---- */

/* Writes all of BUF; false on error. */
static bool write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

/* Answers the client with a short plain-text HTTP error. */
static void reply_error(int fd, int status, const char *text, const char *reason,
                        const char *host, int port)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\n%s%s%sContent-Type: text/plain\r\nConnection: close\r\n"
                     "\r\nmesh egress proxy: %s:%d %s%s%s\n",
                     status, text, reason ? "X-Mesh-Egress-Denied: " : "", reason ? reason : "",
                     reason ? "\r\n" : "", host, port, reason ? "denied: " : "",
                     reason ? reason : text, reason ? " (see the workspace network policy)" : "");
    write_all(fd, buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
}

/* Reads the request head (through the blank line) into BUF; returns its total bytes read
 * (head plus anything after it) and sets *HEAD_LEN, or -1. */
static ssize_t read_head(int fd, char *buf, size_t size, size_t *head_len)
{
    size_t used = 0;
    while (used < size - 1) {
        ssize_t n = recv(fd, buf + used, size - 1 - used, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        used += (size_t)n;
        buf[used] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            *head_len = (size_t)(end - buf) + 4;
            return (ssize_t)used;
        }
    }
    return -1;
}

/* Splits "host:port" / "[v6]:port" (PORT defaults to DEFAULT_PORT) into lower-case HOST. */
static bool split_authority(const char *auth, size_t len, int default_port, char *host,
                            size_t host_size, int *port)
{
    const char *end = auth + len, *colon = NULL, *hs = auth, *he;
    if (len > 0 && auth[0] == '[') {
        const char *close = memchr(auth, ']', len);
        if (!close)
            return false;
        hs = auth + 1;
        he = close;
        colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = memrchr(auth, ':', len);
        he = colon ? colon : end;
    }
    *port = default_port;
    if (colon) {
        char *stop;
        long p = strtol(colon + 1, &stop, 10);
        if (stop != end || p < 1 || p > 65535)
            return false;
        *port = (int)p;
    }
    size_t hl = (size_t)(he - hs);
    while (hl > 0 && hs[hl - 1] == '.')
        hl--;   /* "example.com." is example.com */
    if (hl == 0 || hl >= host_size)
        return false;
    for (size_t i = 0; i < hl; i++) {
        char c = (char)tolower((unsigned char)hs[i]);
        if (!(isalnum((unsigned char)c) || c == '.' || c == '-' || c == ':' || c == '_'))
            return false;
        host[i] = c;
    }
    host[hl] = '\0';
    return true;
}

/* Connects to the first reachable vetted address; -1 when none answers. */
static int connect_any(struct addrinfo *res)
{
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            struct timeval none = {0, 0};
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
            return fd;
        }
        close(fd);
    }
    return -1;
}

/* Relays bytes both ways until both directions ended (or idle too long). */
static void relay(int a, int b)
{
    struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    bool open_dir[2] = {true, true};
    char buf[16384];
    while (open_dir[0] || open_dir[1]) {
        p[0].fd = open_dir[0] ? a : -1;
        p[1].fd = open_dir[1] ? b : -1;
        int r = poll(p, 2, EGRESS_IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        for (int i = 0; i < 2; i++) {
            if (!open_dir[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int from = i ? b : a, to = i ? a : b;
            ssize_t n = recv(from, buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0) {   /* orderly end of this direction: pass it on */
                open_dir[i] = false;
                shutdown(to, SHUT_WR);
                continue;
            }
            if (n < 0 || !write_all(to, buf, (size_t)n))
                return;
        }
    }
}

/* Rewrites an absolute-URI request line to origin form for the upstream server and drops
 * Proxy-* headers; returns the new head (malloc'd). */
static char *origin_form_head(const char *method, const char *path, const char *version,
                              const char *headers)
{
    size_t cap = strlen(headers) + strlen(method) + strlen(path) + strlen(version) + 16;
    char *out = malloc(cap), *o = out;
    o += sprintf(o, "%s %s %s\r\n", method, path, version);
    for (const char *line = headers; *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t len = eol ? (size_t)(eol - line) + 2 : strlen(line);
        if (strncasecmp(line, "Proxy-", 6) != 0) {
            memcpy(o, line, len);
            o += len;
        }
        line += len;
    }
    *o = '\0';
    return out;
}

/* Parses the request line; fills METHOD, TARGET, VERSION (pointers into BUF, NUL-ended) and
 * HEADERS (the rest of the head). */
static bool parse_request_line(char *buf, char **method, char **target, char **version,
                               char **headers)
{
    char *eol = strstr(buf, "\r\n");
    if (!eol)
        return false;
    *eol = '\0';
    *headers = eol + 2;
    *method = buf;
    *target = strchr(buf, ' ');
    if (!*target)
        return false;
    *(*target)++ = '\0';
    *version = strchr(*target, ' ');
    if (!*version)
        return false;
    *(*version)++ = '\0';
    return **method && **target && strncmp(*version, "HTTP/1.", 7) == 0;
}

/* Finds the authority and path of "http://authority/path"; false for other schemes. */
static bool split_http_uri(const char *target, const char **auth, size_t *auth_len,
                           const char **path)
{
    if (strncasecmp(target, "http://", 7) != 0)
        return false;
    *auth = target + 7;
    const char *slash = strpbrk(*auth, "/?");
    *auth_len = slash ? (size_t)(slash - *auth) : strlen(*auth);
    *path = slash && *slash == '/' ? slash : "/";
    return *auth_len > 0;
}

/* Serves one client connection: parse, decide, connect, relay. */
static void serve(struct egress *eg, int fd)
{
    char *buf = malloc(EGRESS_HEAD_MAX), *method, *target, *version, *headers;
    char host[256] = "?";
    int port = 0;
    size_t head_len = 0;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t got = read_head(fd, buf, EGRESS_HEAD_MAX, &head_len);
    if (got < 0 || !parse_request_line(buf, &method, &target, &version, &headers)) {
        reply_error(fd, 400, "Bad Request", NULL, host, port);
        free(buf);
        return;
    }
    bool tunnel = strcmp(method, "CONNECT") == 0;
    const char *auth = target, *path = "/";
    size_t auth_len = strlen(target);
    if ((!tunnel && !split_http_uri(target, &auth, &auth_len, &path)) ||
        !split_authority(auth, auth_len, tunnel ? 443 : 80, host, sizeof host, &port) ||
        (tunnel && !memchr(auth, ':', auth_len))) {
        reply_error(fd, 400, "Bad Request", NULL, host, port);
        free(buf);
        return;
    }
    const char *reason;
    struct addrinfo *res = decide(eg, host, port, &reason);
    int up = res ? connect_any(res) : -1;
    if (res)
        freeaddrinfo(res);
    if (reason) {
        record_denial(eg, host, port, reason);
        reply_error(fd, 403, "Forbidden", reason, host, port);
    } else if (up < 0) {
        reply_error(fd, 502, res ? "Bad Gateway" : "Name Not Resolved", NULL, host, port);
    } else {
        struct timeval none = {0, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        bool ok;
        if (tunnel) {
            static const char established[] = "HTTP/1.1 200 Connection established\r\n\r\n";
            ok = write_all(fd, established, sizeof established - 1);
        } else {
            buf[head_len - 2] = '\0';   /* headers end with their own CRLF */
            char *head = origin_form_head(method, path, version, headers);
            ok = write_all(up, head, strlen(head)) && write_all(up, "\r\n", 2);
            free(head);
        }
        if (ok && (size_t)got > head_len)   /* bytes the client sent after the head */
            ok = write_all(up, buf + head_len, (size_t)got - head_len);
        free(buf);
        buf = NULL;
        if (ok)
            relay(fd, up);
    }
    if (up >= 0)
        close(up);
    free(buf);
}

/* ---- the connection budget, fair per workspace ----
 * Each proxied connection costs two descriptors (client and upstream) and a thread. The daemon
 * keeps FD_RESERVE descriptors plus FD_PER_WORKSPACE per running proxy out of the budget, so
 * idle connections can never make an exec or an acquire fail for want of descriptors. Every
 * workspace may hold EGRESS_SURE_CONNS connections whatever the others do; beyond that, up to
 * EGRESS_MAX_CONNS, connections come from a shared pool that is first come, first served. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static int proxies_running;       /* egress listeners */
static int pool_in_use;           /* connections held beyond their workspace's sure share */

/* Connections the shared pool may hold now (caller holds budget_lock). */
static int pool_size(void)
{
    struct rlimit rl;
    long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
    long conns = (fds - FD_RESERVE - (long)proxies_running * FD_PER_WORKSPACE) / 2;
    return (int)(conns - (long)proxies_running * EGRESS_SURE_CONNS);
}

/* Admits one more connection for EG, or says why not (a refusal reason for the client). */
static const char *budget_admit(struct egress *eg)
{
    const char *refused = NULL;
    pthread_mutex_lock(&budget_lock);
    pthread_mutex_lock(&eg->lock);
    if (eg->conns >= EGRESS_MAX_CONNS)
        refused = "workspace_connection_limit";
    else if (eg->conns >= EGRESS_SURE_CONNS && pool_in_use >= pool_size())
        refused = "daemon_connection_limit";
    if (!refused) {
        if (eg->conns >= EGRESS_SURE_CONNS)
            pool_in_use++;
        eg->conns++;
        eg->refcount++;
    }
    pthread_mutex_unlock(&eg->lock);
    pthread_mutex_unlock(&budget_lock);
    return refused;
}

/* Gives back one connection of EG. */
static void budget_release(struct egress *eg)
{
    pthread_mutex_lock(&budget_lock);
    pthread_mutex_lock(&eg->lock);
    eg->conns--;
    if (eg->conns >= EGRESS_SURE_CONNS)
        pool_in_use--;
    pthread_mutex_unlock(&eg->lock);
    pthread_mutex_unlock(&budget_lock);
}

/* Answers a connection over budget with a clear 503 and closes it. */
static void refuse_connection(struct egress *eg, int fd, const char *reason)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 503 Service Unavailable\r\nX-Mesh-Egress-Refused: %s\r\n"
                     "Content-Type: text/plain\r\nConnection: close\r\n\r\n"
                     "mesh egress proxy: too many open connections (%s; a workspace may hold "
                     "%d, %d of them whatever other workspaces hold); close idle ones\n",
                     reason, reason, EGRESS_MAX_CONNS, EGRESS_SURE_CONNS);
    write_all(fd, buf, (size_t)n);
    close(fd);
    static time_t last_logged;
    time_t now = time(NULL);
    if (now != last_logged) {   /* at most one line a second: a hoarder must not flood it */
        last_logged = now;
        log_event("workspace %s: egress connection refused (%s)", eg->ws_id, reason);
    }
}

/* Thread body of one connection. */
static void *conn_thread(void *arg)
{
    struct conn *c = arg;
    serve(c->eg, c->fd);
    close(c->fd);
    budget_release(c->eg);
    egress_put(c->eg);
    free(c);
    return NULL;
}

/* Accept loop of one workspace's listener; ends when egress_stop shuts the listener. */
static void *accept_thread(void *arg)
{
    struct egress *eg = arg;
    for (;;) {
        int fd = accept4(eg->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                if (errno == EMFILE || errno == ENFILE)
                    usleep(10000);
                continue;
            }
            return NULL;   /* shut down */
        }
        const char *refused = budget_admit(eg);
        if (refused) {
            refuse_connection(eg, fd, refused);
            continue;
        }
        struct conn *c = malloc(sizeof *c);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (c) {
            c->eg = eg;
            c->fd = fd;
        }
        if (!c || pthread_create(&t, &attr, conn_thread, c) != 0) {
            free(c);
            budget_release(eg);
            pthread_mutex_lock(&eg->lock);
            eg->refcount--;
            pthread_mutex_unlock(&eg->lock);
            close(fd);
        }
        pthread_attr_destroy(&attr);
    }
}

/* ---- the listener inside the workspace's network namespace ---- */

/* The listener child's arguments. */
struct listener_spawn {
    struct workspace *ws;
    int sock;
};

/* Child side: joins the namespace (through its owning user namespace when not root), binds
 * 127.0.0.1:EGRESS_PORT there and sends the socket back. Only system calls: it borrows the
 * daemon's memory (spawn_borrowing). */
CHILD_ENTRY static int listener_child(void *arg)
{
    struct workspace *ws = ((struct listener_spawn *)arg)->ws;
    int sock = ((struct listener_spawn *)arg)->sock;
    if ((!g_config.is_root && setns(ws->user_ns_fd, CLONE_NEWUSER) != 0) ||
        setns(ws->net_ns_fd, CLONE_NEWNET) != 0)
        _exit(2);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(EGRESS_PORT),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 64) != 0)
        _exit(3);
    char c = 0;
    char ctrl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&c, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
                         .msg_controllen = sizeof ctrl};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    _exit(sendmsg(sock, &msg, 0) == 1 ? 0 : 4);
}

/* Receives the listener from the helper; -1 on failure. */
static int receive_fd(int sock)
{
    char c;
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&c, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
                         .msg_controllen = sizeof ctrl};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (cm && cm->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

/* Makes the listening socket inside WS's network namespace; -1 on failure. */
static int make_listener(struct workspace *ws)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    struct listener_spawn spawn = {ws, sv[1]};
    pid_t pid = spawn_borrowing(listener_child, &spawn);
    close(sv[1]);
    int fd = pid > 0 ? receive_fd(sv[0]) : -1;
    close(sv[0]);
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    return fd;
}

/* True when the workspace's network setting needs the proxy. */
bool egress_wanted(struct workspace *ws)
{
    return strcmp(ws->network, "open") == 0 || strcmp(ws->network, "allowlist") == 0;
}

/* Starts WS's proxy (after its holder's namespaces are open); true when not needed. */
bool egress_start(struct workspace *ws)
{
    if (!egress_wanted(ws))
        return true;
    int fd = make_listener(ws);
    if (fd < 0) {
        log_event("workspace %s: cannot create the egress listener", ws->id);
        return false;
    }
    struct egress *eg = calloc(1, sizeof *eg);
    snprintf(eg->ws_id, sizeof eg->ws_id, "%s", ws->id);
    eg->listen_fd = fd;
    eg->allowlist = strcmp(ws->network, "allowlist") == 0;
    /* a copy: the accept thread reads it and may drop the last reference after the workspace
     * is gone (workspace_describe says why references are not shared between threads) */
    eg->allow = ws->allow ? json_deep_copy(ws->allow) : json_array();
    eg->refcount = 2;   /* the workspace's and the accept thread's */
    pthread_mutex_init(&eg->lock, NULL);
    if (pthread_create(&eg->thread, NULL, accept_thread, eg) != 0) {
        close(fd);
        json_decref(eg->allow);
        free(eg);
        return false;
    }
    pthread_mutex_lock(&ws->lock);
    ws->egress = eg;
    pthread_mutex_unlock(&ws->lock);
    pthread_mutex_lock(&budget_lock);
    proxies_running++;
    pthread_mutex_unlock(&budget_lock);
    return true;
}

/* Stops WS's proxy: no new connections; connections in flight end with their peers. */
void egress_stop(struct workspace *ws)
{
    pthread_mutex_lock(&ws->lock);
    struct egress *eg = ws->egress;
    ws->egress = NULL;
    pthread_mutex_unlock(&ws->lock);
    if (!eg)
        return;
    shutdown(eg->listen_fd, SHUT_RDWR);   /* wakes accept() with an error */
    pthread_join(eg->thread, NULL);
    close(eg->listen_fd);
    pthread_mutex_lock(&budget_lock);
    proxies_running--;
    pthread_mutex_unlock(&budget_lock);
    egress_put(eg);   /* the accept thread's */
    egress_put(eg);   /* the workspace's */
}

/* Marks the start of an exec: a referenced handle and the denial sequence so far. */
struct egress *egress_mark(struct workspace *ws, uint64_t *seq)
{
    pthread_mutex_lock(&ws->lock);
    struct egress *eg = ws->egress;
    if (eg) {
        pthread_mutex_lock(&eg->lock);
        eg->refcount++;
        *seq = eg->next_seq;
        pthread_mutex_unlock(&eg->lock);
    }
    pthread_mutex_unlock(&ws->lock);
    return eg;
}

/* The denials recorded since SEQ as the protocol's egress_denials array; drops EG's
 * reference. Denials that fell out of the ring are counted in one "ring_overflow" entry. */
json_t *egress_denials_since(struct egress *eg, uint64_t seq)
{
    json_t *list = json_array();
    if (!eg)
        return list;
    pthread_mutex_lock(&eg->lock);
    uint64_t first = eg->next_seq > EGRESS_RING ? eg->next_seq - EGRESS_RING : 0;
    for (uint64_t s = seq > first ? seq : first; s < eg->next_seq; s++) {
        struct egress_denial *d = &eg->ring[s % EGRESS_RING];
        char at[40];
        struct tm tm;
        gmtime_r(&d->at.tv_sec, &tm);
        size_t n = strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(at + n, sizeof at - n, ".%03ldZ", d->at.tv_nsec / 1000000);
        json_array_append_new(list, json_pack("{s:s,s:i,s:s,s:s}", "host", d->host, "port",
                                              d->port, "reason", d->reason, "at", at));
    }
    pthread_mutex_unlock(&eg->lock);
    egress_put(eg);
    return list;
}

/* The detection child: a fresh network namespace (in a fresh user namespace when not root)
 * and a listener on 127.0.0.1 in it. spawn_borrowing, not fork: a sanitizer's fork child runs
 * a thread of the runtime's, and a multithreaded process cannot unshare its user namespace. */
CHILD_ENTRY static int detect_child(void *arg)
{
    (void)arg;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0 && unshare(CLONE_NEWNET) != 0)
        _exit(1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(EGRESS_PORT),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* a fresh namespace's loopback is down: binding 127.0.0.1 still works once up */
    _exit(fd >= 0 &&
          (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 || errno == EADDRNOTAVAIL)
              ? 0 : 1);
}

/* Start-up detection: can this daemon create a listener inside a fresh network namespace
 * (the mechanism above, as this user)? Only then is egress_control true. */
bool egress_detect(void)
{
    pid_t pid = spawn_borrowing(detect_child, NULL);
    int status = 1;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
