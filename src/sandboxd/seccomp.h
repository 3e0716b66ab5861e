/*
 * seccomp.h - the system-call filter every workspace process runs under (seccomp.c).
 */
#ifndef MESH_SANDBOXD_SECCOMP_H
#define MESH_SANDBOXD_SECCOMP_H

#include <stdbool.h>

bool seccomp_detect(void);
bool seccomp_apply(void);
int seccomp_program_fd(void);

#endif
