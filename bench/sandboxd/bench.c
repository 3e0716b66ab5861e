/*
 * bench.c - warm exec through mesh-sandboxd versus the baselines, in one run.
 *
 * Measures N iterations (interleaved, so drift hits all three alike) of:
 *   fork_exec   fork + exec + wait of /bin/true (the floor any exec pays)
 *   cold_bwrap  a fresh `bwrap ... /bin/true` sandbox (what a warm workspace avoids)
 *   warm_exec   POST /v1/workspaces/{id}/exec {"argv":["true"]} over real HTTP, libcurl,
 *               one keep-alive connection
 * and prints medians and the ratios; the target is warm_exec <= 1.5 x fork_exec.
 *
 * usage: bench URL TOKEN_FILE WORKSPACE_ID [N] [SANDBOX_USER_UID]
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* One warm exec over the shared keep-alive handle; elapsed ms or -1. */
static double time_warm_exec(CURL *curl, char *body_out)
{
    long code = 0;
    double start = now_ms();
    if (curl_easy_perform(curl) != CURLE_OK)
        return -1;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200 || !strstr(body_out, "\"exit_code\":0"))
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

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s URL TOKEN_FILE WORKSPACE_ID [N] [SANDBOX_UID]\n", argv[0]);
        return 2;
    }
    int n = argc > 4 ? atoi(argv[4]) : 200;
    uid_t sandbox_uid = argc > 5 ? (uid_t)atoi(argv[5]) : 0;
    char token[512], auth[600], url[1024], body[4096];
    FILE *f = fopen(argv[2], "r");
    if (!f || !fgets(token, sizeof token, f)) {
        fprintf(stderr, "cannot read token\n");
        return 2;
    }
    fclose(f);
    token[strcspn(token, "\r\n")] = '\0';
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    snprintf(url, sizeof url, "%s/v1/workspaces/%s/exec", argv[1], argv[3]);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "{\"argv\":[\"true\"]}");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);

    char *true_argv[] = {"/bin/true", NULL};
    char *bwrap_argv[] = {"/usr/bin/bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc",
                          "--unshare-uts", "--unshare-net", "--ro-bind", "/usr", "/usr",
                          "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                          "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
                          "--tmpfs", "/tmp", "--", "/bin/true", NULL};
    double *fork_exec = calloc((size_t)n, sizeof(double));
    double *cold = calloc((size_t)n, sizeof(double));
    double *warm = calloc((size_t)n, sizeof(double));

    for (int i = 0; i < 10; i++) {   /* warm-up: connection, page cache */
        time_spawn(true_argv, 0);
        time_warm_exec(curl, body);
    }
    for (int i = 0; i < n; i++) {
        fork_exec[i] = time_spawn(true_argv, 0);
        cold[i] = time_spawn(bwrap_argv, sandbox_uid);
        warm[i] = time_warm_exec(curl, body);
        if (fork_exec[i] < 0 || cold[i] < 0 || warm[i] < 0) {
            fprintf(stderr, "iteration %d failed (last response: %s)\n", i, body);
            return 1;
        }
    }
    double m_fork = median(fork_exec, n), m_cold = median(cold, n), m_warm = median(warm, n);
    printf("iterations          %d\n", n);
    printf("fork_exec  median   %.3f ms\n", m_fork);
    printf("cold_bwrap median   %.3f ms\n", m_cold);
    printf("warm_exec  median   %.3f ms   (HTTP keep-alive, libcurl)\n", m_warm);
    printf("warm_exec / fork_exec   %.2fx  (target <= 1.50x)\n", m_warm / m_fork);
    printf("cold_bwrap / warm_exec  %.2fx\n", m_cold / m_warm);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    curl_global_cleanup();
    return m_warm / m_fork <= 1.5 ? 0 : 3;
}
