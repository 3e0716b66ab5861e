#!/bin/bash
# Workspace network access: the per-workspace egress proxy (network open/allowlist), its
# refusals (not allowlisted, raw IP, private, loopback or the host's own addresses) reported per exec, and
# creation-time policy kept across re-acquire, daemon restart and hibernation.
#
# Runs entirely inside network namespaces this test creates (unshare --net): the daemon's
# namespace plays the host, with 10.99.0.1 (private) on its loopback and a veth link whose
# host side carries the public-looking 198.51.100.1/24 and 203.0.113.9/32 (the host's own
# addresses: never reachable through the proxy); a second namespace behind the link plays the
# internet, where the "public" server is 198.51.100.7 (TEST-NET-2). Names map to these
# addresses through the daemon's test-only --test-resolve. No packet leaves the machine.
if [ -z "$MESH_EGRESS_NETNS" ]; then
    exec env MESH_EGRESS_NETNS=1 unshare --net -- bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
plan 35

ip link set lo up
ip addr add 10.99.0.1/32 dev lo
unshare --net -- sleep 600 &
INTERNET=$!
for _ in $(seq 1 50); do
    [ "$(readlink /proc/$INTERNET/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break; sleep 0.05
done
in_internet() { nsenter --net=/proc/$INTERNET/ns/net -- "$@"; }
ip link add mesh-host type veth peer name mesh-net netns "$INTERNET"
ip addr add 198.51.100.1/24 dev mesh-host
ip addr add 203.0.113.9/32 dev mesh-host
ip link set mesh-host up
in_internet sh -c 'ip link set lo up; ip addr add 198.51.100.7/24 dev mesh-net; ip link set mesh-net up'
WWW=$(mktemp -d /tmp/mesh-egress-www.XXXXXX)
SD_DIRS+=("$WWW")
echo "hello from allowed" > "$WWW/hello.txt"
SERVERS=("$INTERNET")
# nsenter itself (not the in_internet function, whose background subshell would be the pid
# recorded while the server outlived it) execs the server: $! is the server, killed on exit
nsenter --net=/proc/$INTERNET/ns/net -- python3 -m http.server --bind 198.51.100.7 --directory "$WWW" 8080 >/dev/null 2>&1 &
SERVERS+=($!)
for addr in 10.99.0.1 127.0.0.1 198.51.100.1 203.0.113.9; do
    python3 -m http.server --bind "$addr" --directory "$WWW" 8080 >/dev/null 2>&1 &
    SERVERS+=($!)
done
trap 'kill "${SERVERS[@]}" 2>/dev/null; wait "${SERVERS[@]}" 2>/dev/null; sd_cleanup' EXIT
for addr in 127.0.0.1 198.51.100.7 198.51.100.1 203.0.113.9; do
    for _ in $(seq 1 50); do curl -s -m 1 "http://$addr:8080/hello.txt" >/dev/null && break; sleep 0.1; done
done

sd_start --test-resolve allowed.test=198.51.100.7 --test-resolve a.wild.test=198.51.100.7 \
         --test-resolve private.wild.test=10.99.0.1 --test-resolve other.test=198.51.100.7 \
         --test-resolve host.wild.test=203.0.113.9 --test-resolve self.test=198.51.100.1 \
         --test-resolve later.test=192.0.2.44
caps=$(api GET /v1/capabilities)
is "$(field "$caps" .capabilities.egress_control)" true "egress_control is detected"

# curl through the sandbox's proxy: prints the HTTP code (000 when no answer)
code() { run_sh "$1" "curl -s -m 5 -o /dev/null -w '%{http_code}' $2"; }
denials() { field "$1" '[.egress_denials[]|"\(.host):\(.port):\(.reason)"]|join(" ")'; }

r=$(api PUT /v1/workspaces/al '{"network":"allowlist","allow":["allowed.test","*.wild.test"]}')
is "$(field "$r" '[.network,(.allow|join(","))]|join(" ")')" "allowlist allowed.test,*.wild.test" \
   "allowlist workspace created with its domains"
r=$(run_sh al 'echo $HTTP_PROXY $HTTPS_PROXY $NO_PROXY')
is "$(stdout_of "$r")" "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" \
   "proxy variables in the base environment"
r=$(run_sh al 'curl -s -m 5 http://allowed.test:8080/hello.txt')
is "$(stdout_of "$r")" "hello from allowed" "allowed domain reachable (http, absolute URI)"
is "$(field "$r" '.egress_denials|length')" 0 "no denials for an allowed request"
r=$(run_sh al 'curl -s -m 5 --proxytunnel http://a.wild.test:8080/hello.txt')
is "$(stdout_of "$r")" "hello from allowed" "wildcard domain reachable through CONNECT"
r=$(code al http://other.test:8080/hello.txt)
is "$(stdout_of "$r")" 403 "other domain refused with 403"
is "$(denials "$r")" "other.test:8080:not_allowlisted" "the refusal is reported by the exec"
like "$(field "$r" '.egress_denials[0].at')" '^20[0-9-]+T[0-9:.]+Z$' "the denial has a time"
r=$(code al http://wild.test:8080/)
is "$(denials "$r")" "wild.test:8080:not_allowlisted" "a wildcard does not match its own apex"
r=$(code al http://198.51.100.7:8080/hello.txt)
is "$(denials "$r")" "198.51.100.7:8080:raw_ip" "raw IP refused in allowlist mode"
r=$(run_sh al 'curl -s -m 5 -o /dev/null -w "%{http_code}" --noproxy "" --proxytunnel -g "http://[::1]:8080/"')
is "$(denials "$r")" "::1:8080:raw_ip" "raw IPv6 refused through CONNECT"
r=$(code al http://private.wild.test:8080/hello.txt)
is "$(denials "$r")" "private.wild.test:8080:private_address" \
   "an allowlisted name resolving to a private address is refused"
r=$(run_sh al 'curl -s -m 3 --noproxy "*" -o /dev/null -w "%{http_code}" http://198.51.100.7:8080/hello.txt')
is "$(stdout_of "$r")" 000 "without the proxy there is no route out"
r=$(run_sh al 'curl -s -m 3 --noproxy "*" -o /dev/null -w "%{http_code}" http://127.0.0.1:8080/hello.txt')
is "$(stdout_of "$r")" 000 "the host's loopback service is not the sandbox's loopback"

# open mode: public destinations (also raw IPs), never loopback, private or host addresses
new_ws op '{"network":"open"}'
r=$(run_sh op 'curl -s -m 5 http://198.51.100.7:8080/hello.txt')
is "$(stdout_of "$r")" "hello from allowed" "open: public address reachable"
r=$(code op '--noproxy "" http://127.0.0.1:8080/hello.txt')
is "$(denials "$r")" "127.0.0.1:8080:private_address" "open: host loopback refused"
r=$(code op '--noproxy "" http://localhost:8080/hello.txt')
is "$(denials "$r")" "localhost:8080:private_address" "open: a name resolving to loopback refused"
r=$(code op http://10.99.0.1:8080/hello.txt)
is "$(denials "$r")" "10.99.0.1:8080:private_address" "open: private address refused"

# the host's own addresses, public ones included, by raw IP and by name, and the metadata
# address: the proxy connects from the host, where these would answer
r=$(code op http://198.51.100.1:8080/hello.txt)
is "$(stdout_of "$r") $(denials "$r")" "403 198.51.100.1:8080:host_address" \
   "open: the host's public address refused by IP"
r=$(code op http://203.0.113.9:8080/hello.txt)
is "$(denials "$r")" "203.0.113.9:8080:host_address" "open: another host address refused"
r=$(code op http://self.test:8080/hello.txt)
is "$(denials "$r")" "self.test:8080:host_address" "open: a name resolving to the host refused"
r=$(code op '-g "http://[::ffff:198.51.100.1]:8080/hello.txt"')
is "$(denials "$r")" "::ffff:198.51.100.1:8080:host_address" "open: the IPv4-mapped form too"
r=$(run_sh op 'curl -s -m 5 -o /dev/null -w "%{http_code}" --proxytunnel http://198.51.100.1:8080/')
is "$(denials "$r")" "198.51.100.1:8080:host_address" "open: and through CONNECT"
r=$(code op http://169.254.169.254/latest/meta-data/)
is "$(denials "$r")" "169.254.169.254:80:private_address" "open: the metadata address refused"
ip addr add 192.0.2.44/32 dev mesh-host
r=$(code op http://later.test:8080/hello.txt)
is "$(denials "$r")" "later.test:8080:host_address" "an address the host gained after start counts"
r=$(code al http://host.wild.test:8080/hello.txt)
is "$(denials "$r")" "host.wild.test:8080:host_address" \
   "allowlist: an allowlisted name resolving to a host address refused"

new_ws no '{}'
r=$(run_sh no 'echo "[$HTTP_PROXY]"; curl -s -m 3 -o /dev/null -w "%{http_code}" --proxy http://127.0.0.1:3128 http://198.51.100.7:8080/')
is "$(stdout_of "$r")" "$(printf '[]\n000')" "network none: no proxy, no route"

r=$(api PUT /v1/workspaces/x1 '{"network":"allowlist","allow":["10.0.0.1"]}')
is "$(status) $(err_code "$r")" "400 bad_domain" "an IP address is not an allowlist entry"
r=$(api PUT /v1/workspaces/x2 '{"network":"sometimes"}')
is "$(status) $(err_code "$r")" "400 bad_request" "unknown network refused"

# creation-time policy: a later acquire with another policy changes nothing
api PUT /v1/workspaces/al '{"network":"open"}' >/dev/null
r=$(code al http://198.51.100.7:8080/hello.txt)
is "$(denials "$r")" "198.51.100.7:8080:raw_ip" "re-acquire does not retrofit the live workspace"

# a restarted daemon re-adopts the holder and serves its proxy again
sd_stop
sd_launch
r=$(run_sh al 'curl -s -m 5 http://allowed.test:8080/hello.txt')
is "$(stdout_of "$r")" "hello from allowed" "after a daemon restart the allowlist proxy works"
r=$(code al http://other.test:8080/)
is "$(denials "$r")" "other.test:8080:not_allowlisted" "and still refuses"

# hibernate and wake: same policy
api DELETE /v1/workspaces/al '{"prefer":"hibernate"}' >/dev/null
r=$(api PUT /v1/workspaces/al '{}')
is "$(field "$r" '[.woke,.network]|map(tostring)|join(" ")')" "true allowlist" "woken with its allowlist"
r=$(code al http://other.test:8080/)
is "$(denials "$r")" "other.test:8080:not_allowlisted" "the woken workspace enforces it"
finish
