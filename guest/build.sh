#!/usr/bin/env bash
# Builds everything the default guest needs, each step cached:
#   out/guest/vmlinux, bzImage        the kernel (guest/kernel/build.sh)
#   out/guest/init                    the Go /init (static)
#   out/guest/pause                   the no-syscall /init of the kernel-only guest
#   out/guest/initramfs.cpio          /init + busybox
#   out/guest/initramfs-pause.cpio    /init = pause
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/out/guest
busybox=${BUSYBOX:-/bin/busybox}
cd "$repo"
mkdir -p "$out" "$repo/build"

bash guest/kernel/build.sh

[[ -x $busybox ]] || { echo "guest: error: $busybox is missing: run 'apt-get install busybox-static'" >&2; exit 1; }
! readelf -l "$busybox" 2>/dev/null | grep -q 'Requesting program interpreter' ||
	{ echo "guest: error: $busybox is not statically linked: install busybox-static, or set BUSYBOX=" >&2; exit 1; }

# Go caches the builds; these take seconds when nothing changed.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/init" ./guest/init
go build -o "$repo/build/initramfs" ./guest/initramfs
gcc -nostdlib -static -Wl,--build-id=none -o "$out/pause.tmp" guest/pause/pause.S
mv "$out/pause.tmp" "$out/pause"

# Rewrite an archive only when its inputs changed, so its mtime means something.
archive() {
	local dest=$1; shift
	local key
	key=$(sha256sum "$repo/build/initramfs" "$@" | sha256sum | cut -c1-16)
	if [[ -f $dest && -f $dest.key && $(<"$dest.key") == "$key" ]]; then
		echo "initramfs: up to date: ${dest#$repo/}"
		return
	fi
	if [[ $# == 2 ]]; then
		"$repo/build/initramfs" -init "$1" -busybox "$2" -o "$dest"
	else
		"$repo/build/initramfs" -init "$1" -o "$dest"
	fi
	echo "$key" >"$dest.key"
}
archive "$out/initramfs.cpio" "$out/init" "$busybox"
archive "$out/initramfs-pause.cpio" "$out/pause"

echo "guest: outputs in ${out#$repo/}/:"
for f in vmlinux bzImage initramfs.cpio initramfs-pause.cpio init pause; do
	printf '  %-22s %s\n' "$f" "$(du -h "$out/$f" | cut -f1)"
done
