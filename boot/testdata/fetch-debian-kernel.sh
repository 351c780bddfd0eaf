#!/usr/bin/env bash
# Fetches a real Debian x86-64 bzImage for boot/'s setup-header test into
# testdata/cache/debian-vmlinuz (gitignored). Idempotent: quick when cached.
# Override the destination with TINYVMM_DEBIAN_BZIMAGE.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=${TINYVMM_DEBIAN_BZIMAGE:-$repo/testdata/cache/debian-vmlinuz}

if [ -s "$dest" ]; then
	echo "debian bzImage: cached at $dest"
	exit 0
fi

# Newest unsigned generic 6.1 image first, then any generic amd64 image.
pkg=$(apt-cache search --names-only '^linux-image-6\.1\.[0-9]+-[0-9]+-amd64-unsigned$' |
	awk '{print $1}' | sort -V | tail -n 1)
if [ -z "$pkg" ]; then
	pkg=$(apt-cache search --names-only '^linux-image-[0-9][0-9.]*-[0-9]+-amd64$' |
		awk '{print $1}' | sort -V | tail -n 1)
fi
if [ -z "$pkg" ]; then
	echo "debian bzImage: no linux-image-*-amd64 package known to apt; run apt-get update" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "debian bzImage: downloading $pkg"
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "$pkg")
deb=$(ls "$work"/*.deb)
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" --wildcards './boot/vmlinuz-*'
img=$(ls "$work"/x/boot/vmlinuz-* | head -n 1)
mkdir -p "$(dirname "$dest")"
cp "$img" "$dest.tmp" && mv "$dest.tmp" "$dest"
echo "debian bzImage: $(basename "$img") from $pkg at $dest"
