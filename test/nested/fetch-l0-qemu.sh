#!/usr/bin/env bash
# Unpacks QEMU from Debian's bookworm-backports suite (10.0 today) into a directory of its own,
# beside the installed Debian 12 QEMU 7.2, without touching the system's packages or apt
# sources. The nested runner boots L1 under it when it is there (qemu.go, QEMUFromEnv): under
# 7.2's TCG, Linux L2 guests die of an event delivered right after SYSCALL (README.md, "Which
# QEMU"). The QEMU that -with-qemu puts into L1 stays the installed one.
#
#   bash test/nested/fetch-l0-qemu.sh [DIR]   # default ${XDG_CACHE_HOME:-$HOME/.cache}/tinyvmm/l0-qemu
#
# Idempotent: quick when DIR already holds a QEMU that runs.
set -euo pipefail
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tinyvmm/l0-qemu}
bin=$dir/usr/bin/qemu-system-x86_64

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "L0 QEMU: cached, $("$bin" --version | head -n 1) at $dir"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt reads only this list and keeps its indexes and downloads under $work.
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" >"$work/sources.list"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
apt_opts=(-qq -o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
	-o Dir::State::lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
	-o APT::Sandbox::User=root)
echo "L0 QEMU: reading bookworm-backports' package list"
apt-get "${apt_opts[@]}" update
# The four packages that differ from bookworm's; every library they link is in bookworm and
# installed with its qemu-system-x86 (checked below).
pkgs=(qemu-system-x86 qemu-system-common qemu-system-data seabios)
(cd "$work/debs" && apt-get "${apt_opts[@]}" download "${pkgs[@]/%//bookworm-backports}")
for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/root"; done

missing=$(ldd "$work/root/usr/bin/qemu-system-x86_64" | awk '/not found/ {print $1}')
if [ -n "$missing" ]; then
	echo "L0 QEMU: missing libraries: $missing (apt-get install qemu-system-x86 brings them)" >&2
	exit 1
fi
version=$("$work/root/usr/bin/qemu-system-x86_64" --version | head -n 1)
mkdir -p "$(dirname "$dir")"
rm -rf "$dir.tmp" && mv "$work/root" "$dir.tmp" && rm -rf "$dir" && mv "$dir.tmp" "$dir"
echo "L0 QEMU: $version at $dir"
