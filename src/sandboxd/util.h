/*
 * util.h - small helpers shared by several modules: the sandbox user's look-up, children that
 * borrow the daemon's memory, time, formatted allocation, atomic file replacement, recursive
 * removal and directory creation (util.c).
 */
#ifndef MESH_SANDBOXD_UTIL_H
#define MESH_SANDBOXD_UTIL_H

#include <pwd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

bool user_lookup(const char *name, uid_t uid, struct passwd *pw, char *buf, size_t len);

/*
 * Children that borrow the daemon's memory (holder and listener spawns) are created with
 * CLONE_VM: no page tables are copied, so their cost does not grow with the daemon's threads
 * and mappings. Sanitizer builds (make tsan, make asan) give them a copy instead (slower, same
 * results): ThreadSanitizer models every clone() as a fork() and corrupts its own state when
 * the child shares memory, and a child running AddressSanitizer's instrumented code can exit
 * holding one of its locks, which then deadlocks every thread of the daemon.
 */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer) || \
    defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define HELPER_CLONE_VM 0
#else
#define HELPER_CLONE_VM CLONE_VM
#endif
/* Marks a function that runs in such a child and exits from it: not instrumented by
 * AddressSanitizer, whose runtime warns about the foreign stack at _exit and, inside a
 * sandbox, cannot write that warning to its log and dies instead. */
#define CHILD_ENTRY __attribute__((no_sanitize("address")))
pid_t spawn_borrowing(int (*fn)(void *), void *arg);
CHILD_ENTRY bool become_sandbox_user(void);
CHILD_ENTRY bool write_proc_file(const char *path, const char *text);
double monotonic_ms(void);
struct timespec realtime_in_ms(long ms);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool write_file_atomic(const char *path, const char *data, size_t len, mode_t mode, bool sync);
bool remove_tree(const char *path);
bool mkdir_p(const char *path, mode_t mode);
void close_fd(int *fd);

#endif
