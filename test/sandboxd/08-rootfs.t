#!/bin/bash
# --rootfs: a configured read-only base instead of the host's /usr and curated /etc.
. "$(dirname "$0")/lib.sh"
plan 4
ROOTFS=$(mktemp -d /tmp/mesh-sd-rootfs.XXXXXX)
SD_DIRS+=("$ROOTFS")
chmod 755 "$ROOTFS"
mkdir -p "$ROOTFS"/{usr/bin,workspace,tmp,proc,dev,etc}
ln -s usr/bin "$ROOTFS/bin"
for b in sh sleep ls cat; do
    cp "$(readlink -f "/usr/bin/$b")" "$ROOTFS/usr/bin/$b"
    for lib in $(ldd "/usr/bin/$b" | grep -o '/[^ ]*'); do
        mkdir -p "$ROOTFS$(dirname "$lib")"; cp -n "$lib" "$ROOTFS$lib"
    done
done
echo "rootfs-marker" > "$ROOTFS/etc/marker"
sd_start --rootfs "$ROOTFS"
is "$(field "$(api GET /v1/capabilities)" .capabilities.shell)" true "shell detected in the rootfs"
new_ws r1
r=$(run_sh r1 'cat /etc/marker; echo /usr/bin/*')
is "$(stdout_of "$r")" "rootfs-marker
/usr/bin/cat /usr/bin/ls /usr/bin/sh /usr/bin/sleep" "commands see the configured rootfs, not the host"
r=$(run_sh r1 'echo x > /usr/bin/new')
ok $(( $(field "$r" .exit_code) == 0 )) "the rootfs is read-only"
r=$(run_sh r1 'echo data > f; cat f')
is "$(stdout_of "$r")" data "/workspace is writable"
finish
