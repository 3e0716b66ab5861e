# isolation_checks.sh - isolation assertions shared by the root (03) and non-root (07) runs.
# Needs: a started daemon (lib.sh), workspaces iso1 and iso2, and EXPECT_UID (sandbox uid).
# Emits 27 TAP lines. Every check that something is NOT visible, reachable or written has its
# positive control beside it: the planted file, the probe server or the host path it looks at is
# there from outside, and the probe itself reports what it is after when it is there.

isolation_checks() {
    local r st port server server2 host_ip
    r=$(run_sh iso1 'grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):" /proc/self/status | tr -s "\t" " "')
    st=$(stdout_of "$r")
    like "$st" "CapEff: 0000000000000000" "CapEff is 0 inside (exec joins a running sandbox)"
    is "$(echo "$st" | grep -c ' 0000000000000000$')" 5 "CapInh, CapPrm, CapEff, CapBnd, CapAmb all 0"
    like "$st" "NoNewPrivs: 1" "no_new_privs is set"
    r=$(exec_json iso1 '{"argv":["id","-u"]}')
    is "$(stdout_of "$r")" "$EXPECT_UID" "commands run as the unprivileged sandbox uid"

    # controls: the tools the escapes below use are there inside, a write that may succeed does,
    # and from outside the host's /usr and /tmp take the files an escape would write
    r=$(run_sh iso1 'command -v touch && command -v mount && command -v unshare')
    is "$(field "$r" .exit_code)" 0 "control: touch, mount and unshare exist inside"
    r=$(run_sh iso1 'touch /workspace/control-write && test -e /workspace/control-write && rm /workspace/control-write')
    is "$(field "$r" .exit_code)" 0 "control: touch writes where the sandbox may write"
    # (names of this run's own: the sanitizer runs of this file go on side by side)
    touch "/usr/mesh-test-control-$$" "/tmp/iso1-control-$$" && test -e "/usr/mesh-test-control-$$" &&
        test -e "/tmp/iso1-control-$$"
    ok $? "control: from outside, files can be made in the host's /usr and /tmp, where an escape would land"
    rm -f "/usr/mesh-test-control-$$" "/tmp/iso1-control-$$"
    r=$(run_sh iso1 'touch /usr/mesh-test-file')
    ok $(( $(field "$r" .exit_code) == 0 )) "/usr cannot be written"
    r=$(run_sh iso1 'mount -o remount,rw /usr')
    ok $(( $(field "$r" .exit_code) == 0 )) "mount -o remount,rw /usr fails"
    r=$(run_sh iso1 'unshare -Urm sh -c "mount -o remount,rw /usr && touch /usr/mesh-test-file"')
    ok $(( $(field "$r" .exit_code) == 0 )) "not even from a nested user namespace"
    test ! -e /usr/mesh-test-file; ok $? "nothing appeared in the host's /usr"

    # the paths looked for are those the host has (control: its secrets, /root, the state and
    # token dirs among them); /workspace, which the sandbox has, is the probe's own control
    local paths="" p
    for p in /etc/shadow /etc/gshadow /etc/ssh /root /home /etc/ssl/private "$SD_DIR" "$SD_STATE"; do
        [ -e "$p" ] && paths+=" $p"
    done
    like "$paths" "/etc/shadow /etc/gshadow .*/root .*$SD_DIR $SD_STATE\$" \
       "control: from outside, /etc/shadow, /etc/gshadow, /root, the token dir and the state dir exist"
    r=$(run_sh iso1 'for p in /workspace '"$paths"'; do test -e $p && echo "visible: $p"; done; true')
    is "$(stdout_of "$r")" "visible: /workspace" "host secrets, /root, /home, the state dir and token dir are not visible (only /workspace is)"

    api PUT "/v1/workspaces/iso2/files?path=secret-of-iso2" "iso2-secret-value" >/dev/null
    is "$(cat "$SD_STATE/workspaces/iso2/files/secret-of-iso2" 2>/dev/null)" "iso2-secret-value" \
       "control: the planted file is in iso2's files on the host"
    r=$(run_sh iso2 'grep -rs iso2-secret-value /workspace /tmp /etc /proc/self/root/workspace')
    like "$(stdout_of "$r")" "secret-of-iso2:iso2-secret-value" "control: the same search finds it inside iso2"
    r=$(run_sh iso1 'grep -rs iso2-secret-value /workspace /tmp /etc /proc/self/root/workspace; ls /workspace')
    is "$(stdout_of "$r")" "" "another workspace's files cannot be seen"
    r=$(run_sh iso1 'echo private > /tmp/iso1-tmp-file && cat /tmp/iso1-tmp-file')
    is "$(stdout_of "$r")" private "control: iso1 writes and reads its own /tmp/iso1-tmp-file"
    r=$(run_sh iso2 'cat /tmp/iso1-tmp-file')
    ok $(( $(field "$r" .exit_code) == 0 )) "/tmp is private to the workspace"
    test ! -e /tmp/iso1-tmp-file; ok $? "and not the host's /tmp"

    # the probe servers listen on the host's 127.0.0.1 and on its own address (this machine's:
    # hostname -I; 127.0.0.2, also the host's, where it has none)
    port=$(free_port)
    host_ip=$(hostname -I 2>/dev/null | awk '{print $1}')
    host_ip=${host_ip:-127.0.0.2}
    python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1 &
    server=$!
    python3 -m http.server "$port" --bind "$host_ip" >/dev/null 2>&1 &
    server2=$!
    for _ in $(seq 1 50); do
        curl -s -m 1 "http://127.0.0.1:$port/" >/dev/null && curl -s -m 1 "http://$host_ip:$port/" >/dev/null && break
        sleep 0.1
    done
    curl -sf -m 3 -o /dev/null "http://127.0.0.1:$port/" && curl -sf -m 3 -o /dev/null "http://$host_ip:$port/"
    ok $? "control: from outside, the probe servers answer on 127.0.0.1 and $host_ip"
    r=$(exec_json iso1 "$(jq -nc --arg p "$port" --arg h "$host_ip" '{argv:["python3","-c","import socket,sys\nfor h in [\"127.0.0.1\",sys.argv[1]]:\n  try:\n    socket.create_connection((h,int(sys.argv[2])),timeout=2); print(\"reached\",h)\n  except OSError as e: print(\"blocked\",h)\ns=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen()\ntry:\n  socket.create_connection(s.getsockname(),timeout=2); print(\"reached own\")\nexcept OSError: print(\"blocked own\")", $h, $p]}')")
    like "$(stdout_of "$r")" "reached own" "control: the probe reaches a listener of the sandbox's own loopback"
    like "$(stdout_of "$r")" "blocked 127.0.0.1" "a service on the host's 127.0.0.1 cannot be reached"
    like "$(stdout_of "$r")" "blocked $host_ip" "nor the host's address"
    kill "$server" "$server2" 2>/dev/null; wait "$server" "$server2" 2>/dev/null
    r=$(run_sh iso1 "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    is "$(stdout_of "$r")" "lo" "only loopback exists inside"

    ok $(( $(ls /proc | grep -c '^[0-9]') <= 8 )) "control: the host has more than 8 processes"
    r=$(run_sh iso1 'ls /proc | grep -c "^[0-9]"')
    ok $(( $(stdout_of "$r") > 8 )) "host processes are not visible (pid namespace)"
    run_sh iso1 'echo made-inside > owned-by-sandbox' >/dev/null
    is "$(stat -c %u "$SD_STATE/workspaces/iso1/files/owned-by-sandbox")" "$EXPECT_UID" "files created inside belong to the sandbox uid on the host"
}
