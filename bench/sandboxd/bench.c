/*
 * bench.c - mesh-sandboxd against its baselines, in one run.
 *
 * Measures N iterations (interleaved, so drift hits all alike) of:
 *   fork_exec   fork + exec + wait of /bin/true (the floor any exec pays)
 *   warm_exec   POST /v1/workspaces/{id}/exec {"argv":["true"]} over real HTTP, libcurl,
 *               one keep-alive connection
 * then N/10 (at least 20) interleaved iterations of:
 *   bare_bwrap  the holder's own bwrap command line (read from the running holder, its
 *               descriptor arguments left out) running /bin/true as the sandbox user
 *   cold_start  PUT /v1/workspaces/{id}-cold (acquire) and the first exec of true in it
 *               (the release after it is not timed)
 * then the CPU of N warm execs and of N fork_execs, each alone: the daemon's (its cpuacct
 * groups, when run.sh gives them) and the client's. Prints medians and ratios; targets:
 * warm_exec <= 1.1 x fork_exec, cold_start <= 2 x bare_bwrap (exit 3 when one is missed).
 *
 * usage: bench URL TOKEN_FILE WORKSPACE_ID N SANDBOX_UID HOLDER_CMDLINE_FILE [CPUACCT_USAGE...]
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Milliseconds on the monotonic clock. */
static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Runs argv to completion (as UID when root and UID > 0); returns elapsed ms or -1. */
static double time_spawn(char *const argv[], uid_t uid)
{
    double start = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        if (uid > 0 && geteuid() == 0 &&
            (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0))
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? now_ms() - start : -1;
}

/* libcurl write callback that keeps the last response for error reports. */
static size_t keep_body(char *data, size_t size, size_t n, void *userp)
{
    char *buf = userp;
    size_t len = size * n < 4095 ? size * n : 4095;
    memcpy(buf, data, len);
    buf[len] = '\0';
    return size * n;
}

/* One request on handle CURL: METHOD to URL with BODY (NULL: none); elapsed ms or -1 when the
 * status is not 200 or NEEDLE is missing from the response. */
static double time_request(CURL *curl, const char *method, const char *url, const char *body,
                           char *body_out, const char *needle)
{
    long code = 0;
    double start = now_ms();
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body : "");
    body_out[0] = '\0';
    if (curl_easy_perform(curl) != CURLE_OK)
        return -1;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200 || (needle && !strstr(body_out, needle)))
        return -1;
    return now_ms() - start;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of N samples (sorts in place). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * The bare sandbox: the holder's command line (NUL-separated, as /proc/PID/cmdline has it)
 * without its descriptor arguments (--info-fd, --seccomp: the filter is a descriptor of the
 * daemon's) and with /bin/true as the command. Printed, so the comparison can be checked.
 */
static char **bare_bwrap_argv(const char *cmdline_file)
{
    static char buf[65536];
    static char *argv[512];
    FILE *f = fopen(cmdline_file, "r");
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    int n = 0;
    if (f)
        fclose(f);
    for (size_t pos = 0; pos < len && n < 500; pos += strlen(buf + pos) + 1) {
        char *arg = buf + pos;
        if (strcmp(arg, "--info-fd") == 0 || strcmp(arg, "--seccomp") == 0) {
            pos += strlen(arg) + 1;   /* and its descriptor number */
            continue;
        }
        if (strcmp(arg, "--") == 0)
            break;
        argv[n++] = arg;
    }
    if (n == 0)
        return NULL;
    argv[n++] = "--";
    argv[n++] = "/bin/true";
    argv[n] = NULL;
    printf("bare_bwrap command line:");
    for (int i = 0; argv[i]; i++)
        printf(" %s", argv[i]);
    printf("\n");
    return argv;
}

/* Sum of the cpuacct.usage files (ns) given, -1 when there are none or one cannot be read. */
static double cpuacct_ns(char **files, int count)
{
    double total = 0;
    for (int i = 0; i < count; i++) {
        FILE *f = fopen(files[i], "r");
        unsigned long long v;
        if (!f || fscanf(f, "%llu", &v) != 1) {
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
        total += (double)v;
    }
    return count > 0 ? total : -1;
}

/* CPU ms of this process and of its reaped children. */
static double own_cpu_ms(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return u.ru_utime.tv_sec * 1e3 + u.ru_utime.tv_usec / 1e3 + u.ru_stime.tv_sec * 1e3 +
           u.ru_stime.tv_usec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s URL TOKEN_FILE WORKSPACE_ID N SANDBOX_UID HOLDER_CMDLINE "
                "[CPUACCT_USAGE...]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[4]), n_cold = n / 10 < 20 ? 20 : n / 10;
    uid_t sandbox_uid = (uid_t)atoi(argv[5]);
    char **bwrap_argv = bare_bwrap_argv(argv[6]);
    char **cpu_files = argv + 7;
    int cpu_file_count = argc - 7;
    char token[512], auth[600], exec_url[1024], cold_url[1024], cold_exec_url[1100], body[4096];
    FILE *f = fopen(argv[2], "r");
    if (!f || !fgets(token, sizeof token, f) || !bwrap_argv) {
        fprintf(stderr, "cannot read the token or the holder's command line\n");
        return 2;
    }
    fclose(f);
    token[strcspn(token, "\r\n")] = '\0';
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    snprintf(exec_url, sizeof exec_url, "%s/v1/workspaces/%s/exec", argv[1], argv[3]);
    snprintf(cold_url, sizeof cold_url, "%s/v1/workspaces/%s-cold", argv[1], argv[3]);
    snprintf(cold_exec_url, sizeof cold_exec_url, "%s/exec", cold_url);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
    const char *true_body = "{\"argv\":[\"true\"]}", *ok = "\"exit_code\":0";

    char *true_argv[] = {"/bin/true", NULL};
    double *fork_exec = calloc((size_t)n, sizeof(double));
    double *warm = calloc((size_t)n, sizeof(double));
    double *bare = calloc((size_t)n_cold, sizeof(double));
    double *cold = calloc((size_t)n_cold, sizeof(double));

    for (int i = 0; i < 10; i++) {   /* warm-up: connection, page cache */
        time_spawn(true_argv, 0);
        time_request(curl, "POST", exec_url, true_body, body, ok);
    }
    for (int i = 0; i < n; i++) {
        fork_exec[i] = time_spawn(true_argv, 0);
        warm[i] = time_request(curl, "POST", exec_url, true_body, body, ok);
        if (fork_exec[i] < 0 || warm[i] < 0) {
            fprintf(stderr, "iteration %d failed (last response: %s)\n", i, body);
            return 1;
        }
    }
    for (int i = 0; i < n_cold; i++) {
        bare[i] = time_spawn(bwrap_argv, sandbox_uid);
        double acquire = time_request(curl, "PUT", cold_url, NULL, body, NULL);
        double first = acquire < 0 ? -1 : time_request(curl, "POST", cold_exec_url, true_body,
                                                       body, ok);
        cold[i] = first < 0 ? -1 : acquire + first;
        if (bare[i] < 0 || cold[i] < 0) {
            fprintf(stderr, "cold iteration %d failed (last response: %s)\n", i, body);
            return 1;
        }
        if (time_request(curl, "DELETE", cold_url, NULL, body, NULL) < 0) {
            fprintf(stderr, "release failed: %s\n", body);
            return 1;
        }
    }

    /* CPU: the warm execs alone, then the fork_execs alone */
    double daemon0 = cpuacct_ns(cpu_files, cpu_file_count), client0 = own_cpu_ms(RUSAGE_SELF);
    for (int i = 0; i < n; i++)
        if (time_request(curl, "POST", exec_url, true_body, body, ok) < 0)
            return 1;
    double daemon_cpu = cpuacct_ns(cpu_files, cpu_file_count), client_cpu = own_cpu_ms(RUSAGE_SELF);
    daemon_cpu = daemon0 < 0 || daemon_cpu < 0 ? -1 : (daemon_cpu - daemon0) / 1e6 / n;
    client_cpu = (client_cpu - client0) / n;
    double fork0 = own_cpu_ms(RUSAGE_SELF) + own_cpu_ms(RUSAGE_CHILDREN);
    for (int i = 0; i < n; i++)
        time_spawn(true_argv, 0);
    double fork_cpu = (own_cpu_ms(RUSAGE_SELF) + own_cpu_ms(RUSAGE_CHILDREN) - fork0) / n;

    double m_fork = median(fork_exec, n), m_warm = median(warm, n);
    double m_bare = median(bare, n_cold), m_cold = median(cold, n_cold);
    printf("iterations          %d warm, %d cold\n", n, n_cold);
    printf("fork_exec  median   %.3f ms\n", m_fork);
    printf("warm_exec  median   %.3f ms   (HTTP keep-alive, libcurl)\n", m_warm);
    printf("bare_bwrap median   %.3f ms   (the holder's flags, /bin/true)\n", m_bare);
    printf("cold_start median   %.3f ms   (acquire + first exec of true)\n", m_cold);
    printf("warm_exec / fork_exec   %.2fx  (target <= 1.10x)\n", m_warm / m_fork);
    printf("cold_start / bare_bwrap %.2fx  (target <= 2.00x)\n", m_cold / m_bare);
    if (daemon_cpu >= 0)
        printf("CPU per warm exec   %.3f ms daemon, sandbox and command + %.3f ms client "
               "(libcurl); fork_exec %.3f ms\n", daemon_cpu, client_cpu, fork_cpu);
    else
        printf("CPU per warm exec   (daemon not in a cpuacct group) + %.3f ms client; "
               "fork_exec %.3f ms\n", client_cpu, fork_cpu);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    curl_global_cleanup();
    return m_warm / m_fork <= 1.1 && m_cold / m_bare <= 2.0 ? 0 : 3;
}
