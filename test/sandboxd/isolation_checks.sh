# isolation_checks.sh - isolation assertions shared by the root (03) and non-root (07) runs.
# Needs: a started daemon (lib.sh), workspaces iso1 and iso2, and EXPECT_UID (sandbox uid).
# Emits 17 TAP lines.

isolation_checks() {
    local r st port server host_ip
    r=$(run_sh iso1 'grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):" /proc/self/status | tr -s "\t" " "')
    st=$(stdout_of "$r")
    like "$st" "CapEff: 0000000000000000" "CapEff is 0 inside (exec joins a running sandbox)"
    is "$(echo "$st" | grep -c ' 0000000000000000$')" 5 "CapInh, CapPrm, CapEff, CapBnd, CapAmb all 0"
    like "$st" "NoNewPrivs: 1" "no_new_privs is set"
    r=$(exec_json iso1 '{"argv":["id","-u"]}')
    is "$(stdout_of "$r")" "$EXPECT_UID" "commands run as the unprivileged sandbox uid"

    r=$(run_sh iso1 'touch /usr/mesh-test-file')
    ok $(( $(field "$r" .exit_code) == 0 )) "/usr cannot be written"
    r=$(run_sh iso1 'mount -o remount,rw /usr')
    ok $(( $(field "$r" .exit_code) == 0 )) "mount -o remount,rw /usr fails"
    r=$(run_sh iso1 'unshare -Urm sh -c "mount -o remount,rw /usr && touch /usr/mesh-test-file"')
    ok $(( $(field "$r" .exit_code) == 0 )) "not even from a nested user namespace"
    test ! -e /usr/mesh-test-file; ok $? "nothing appeared in the host's /usr"

    r=$(run_sh iso1 'for p in /etc/shadow /etc/gshadow /etc/ssh /root /home /etc/ssl/private '"$SD_DIR"' '"$SD_STATE"'; do test -e $p && echo "visible: $p"; done; true')
    is "$(stdout_of "$r")" "" "host secrets, /root, /home, the state dir and token dir are not visible"

    api PUT "/v1/workspaces/iso2/files?path=secret-of-iso2" "iso2-secret-value" >/dev/null
    r=$(run_sh iso1 'grep -rs iso2-secret-value /workspace /tmp /etc /proc/self/root/workspace; ls /workspace')
    is "$(stdout_of "$r")" "" "another workspace's files cannot be seen"
    run_sh iso1 'echo private > /tmp/iso1-tmp-file' >/dev/null
    r=$(run_sh iso2 'cat /tmp/iso1-tmp-file')
    ok $(( $(field "$r" .exit_code) == 0 )) "/tmp is private to the workspace"
    test ! -e /tmp/iso1-tmp-file; ok $? "and not the host's /tmp"

    port=$(free_port)
    python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 1 50); do curl -s -m 1 "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
    host_ip=$(hostname -I 2>/dev/null | awk '{print $1}')
    r=$(exec_json iso1 "$(jq -nc --arg p "$port" --arg h "${host_ip:-10.0.0.1}" '{argv:["python3","-c","import socket,sys\nfor h in [\"127.0.0.1\",sys.argv[1]]:\n  try:\n    socket.create_connection((h,int(sys.argv[2])),timeout=2); print(\"reached\",h)\n  except OSError as e: print(\"blocked\",h)", $h, $p]}')")
    like "$(stdout_of "$r")" "blocked 127.0.0.1" "a service on the host's 127.0.0.1 cannot be reached"
    like "$(stdout_of "$r")" "blocked ${host_ip:-10.0.0.1}" "nor the host's address"
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null
    r=$(run_sh iso1 "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    is "$(stdout_of "$r")" "lo" "only loopback exists inside"

    r=$(run_sh iso1 'ls /proc | grep -c "^[0-9]"')
    ok $(( $(stdout_of "$r") > 8 )) "host processes are not visible (pid namespace)"
    run_sh iso1 'echo made-inside > owned-by-sandbox' >/dev/null
    is "$(stat -c %u "$SD_STATE/workspaces/iso1/files/owned-by-sandbox")" "$EXPECT_UID" "files created inside belong to the sandbox uid on the host"
}
