#!/usr/bin/env bash
# Bgworker hygiene and the one driver runner, checked in the source (docs/design.md):
# no sleeping loop in any background worker; every backend request goes through the
# driver runner (src/runner.c), so no other file starts an HTTP transfer or calls a
# driver's response parser; curl's sockets come from its socket callback, never from
# curl_multi_fdset; no curl call's result is thrown away.
cd "$(dirname "$0")/../.."
. test/e2e/lib.sh
plan 5
src=$(find src -maxdepth 2 -name '*.c' | grep -v '^src/sandboxd/')

h=$(grep -nE '\b(pg_usleep|usleep|nanosleep|sleep)\s*\(' $src)
[ -z "$h" ]; ok $? "no sleeping call in the extension's processes"
[ -n "$h" ] && echo "$h" | sed 's/^/# /'

h=$(grep -nE '\bmesh_http_start\s*\(' $src | grep -vE '^src/(runner|worker_http)\.c:')
[ -z "$h" ]; ok $? "only the driver runner starts HTTP transfers"
[ -n "$h" ] && echo "$h" | sed 's/^/# /'

h=$(grep -nE 'driver->[a-z]+_response\s*\(' $src | grep -v '^src/runner\.c:')
[ -z "$h" ]; ok $? "only the driver runner calls drivers' response parsers"
[ -n "$h" ] && echo "$h" | sed 's/^/# /'

h=$(grep -n 'curl_multi_fdset' $src)
[ -z "$h" ]; ok $? "no curl_multi_fdset: sockets come from CURLMOPT_SOCKETFUNCTION"
[ -n "$h" ] && echo "$h" | sed 's/^/# /'

# a curl call that starts a statement (the line before ends one), its result unused
h=$(awk '/^[ \t]*(\(void\)[ \t]*)?curl_(easy_setopt|easy_getinfo|multi_[a-z_]+)[ \t]*\(/ && prev ~ /[;{}][ \t]*$/ \
          { print FILENAME ":" FNR ": " $0 } NF { prev = $0 }' $src)
[ -z "$h" ]; ok $? "every curl_easy_setopt, curl_easy_getinfo and curl_multi_* result is checked"
[ -n "$h" ] && echo "$h" | sed 's/^/# /'
done_testing
