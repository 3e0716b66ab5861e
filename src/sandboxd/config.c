/*
 * config.c - the daemon-wide settings, capabilities and drain flag (config.h): written by the
 * main thread before the listeners start (g_shutting_down once, atomically, at the drain).
 */
#include "config.h"

struct config g_config;
struct host_caps g_caps;
int g_shutting_down;
