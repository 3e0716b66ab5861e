/*
 * log.h - the daemon's event log: one timestamped line per event on stderr (log.c).
 */
#ifndef MESH_SANDBOXD_LOG_H
#define MESH_SANDBOXD_LOG_H

void log_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
