# Makefile for mesh_exec (PGXS) and mesh-sandboxd (plain make in src/sandboxd)

MODULE_big = mesh_exec
OBJS = \
	src/mesh_exec.o \
	src/settings.o \
	src/handoff.o \
	src/calls.o \
	src/stages.o \
	src/stats.o \
	src/api.o \
	src/worker.o \
	src/worker_call.o \
	src/worker_durable.o \
	src/worker_reply.o \
	src/worker_acquire.o \
	src/worker_command.o \
	src/worker_exec.o \
	src/exec_output.o \
	src/worker_files.o \
	src/worker_release.o \
	src/worker_snapshot.o \
	src/store_snapshot.o \
	src/store_background.o \
	src/worker_background.o \
	src/worker_recover.o \
	src/worker_failures.o \
	src/worker_http.o \
	src/runner.o \
	src/store.o \
	src/txn.o \
	src/launcher.o \
	src/reaper.o \
	src/credentials.o \
	src/broker.o \
	src/backends/registry.o \
	src/backends/sandboxd.o \
	src/backends/docker.o \
	src/backends/docker_api.o \
	src/backends/docker_exec.o \
	src/backends/docker_files.o \
	src/backends/docker_background.o \
	src/backends/kubernetes.o \
	src/backends/kubernetes_api.o \
	src/backends/kubernetes_pod.o \
	src/backends/kubernetes_proxy.o \
	src/backends/kubernetes_parse.o \
	src/backends/sandboxd_parse.o \
	src/version.o \
	src/backends/isolate.o \
	src/repos/jwt.o \
	src/repos/github.o \
	src/repos/gitlab.o \
	src/broker_repos.o \
	src/backends/edge.o \
	src/backends/edge_sprite.o \
	src/backends/edge_parse.o \
	src/isolated_launcher.o \

EXTENSION = mesh_exec
# The version the control file installs by default; the library refuses to serve any other
# (src/version.c).  Its script is built from sql/src/ (one file per concept, in name order);
# released versions' scripts and the upgrade scripts between them are kept as shipped.
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(srcdir)/mesh_exec.control)
DATA_built = sql/mesh_exec--$(EXTVERSION).sql
DATA = $(filter-out $(DATA_built),$(patsubst $(srcdir)/%,%,$(wildcard $(srcdir)/sql/mesh_exec--*.sql)))
PGFILEDESC = "mesh_exec - sandboxed execution for AI-agent harnesses"

# pg_regress files: every sql/NAME.sql with expected/NAME.out, setup first (it checks the
# install and defines what the others use); the extension's own scripts are not tests.
REGRESS = setup $(sort $(filter-out setup mesh_exec--%,$(basename $(notdir $(wildcard $(srcdir)/sql/*.sql)))))
REGRESS_OPTS = --inputdir=. --use-existing

PG_CPPFLAGS = -DMESH_EXEC_VERSION='"$(EXTVERSION)"' -I$(srcdir)/src $(shell pkg-config --cflags jansson libcurl libmicrohttpd)
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers
SHLIB_LINK = $(shell pkg-config --libs jansson libcurl libmicrohttpd libcrypto) \
	-Wl,--version-script=$(srcdir)/src/mesh_exec.map

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# pg_regress runs in an existing database: the one the server's workers serve (mesh.database),
# with mesh_exec created in it (README "Running the tests against your server").  It connects
# like psql, with PGHOST, PGPORT, PGUSER and PGDATABASE; without PGDATABASE, mesh_test.
CONTRIB_TESTDB = $(or $(PGDATABASE),mesh_test)

sql/mesh_exec--$(EXTVERSION).sql: $(sort $(wildcard $(srcdir)/sql/src/*.sql))
	cat $^ > $@

# What the library exports (src/mesh_exec.map) is part of its link.
$(shlib): src/mesh_exec.map

# Headers are few: rebuild every object when one changes.
$(OBJS): $(wildcard src/*.h src/backends/*.h src/repos/*.h)

# The daemon is a plain C program with its own Makefile; it never links PostgreSQL.
all: sandboxd
.PHONY: sandboxd
sandboxd:
	$(MAKE) -C src/sandboxd

install: install-sandboxd
.PHONY: install-sandboxd
install-sandboxd: sandboxd
	$(INSTALL_PROGRAM) src/sandboxd/mesh-sandboxd '$(DESTDIR)$(bindir)/mesh-sandboxd'
	$(INSTALL_PROGRAM) src/sandboxd/mesh-exec-agent '$(DESTDIR)$(bindir)/mesh-exec-agent'

clean: clean-sandboxd
.PHONY: clean-sandboxd
clean-sandboxd:
	-$(MAKE) -C src/sandboxd clean
