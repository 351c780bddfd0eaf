#!/usr/bin/env bash
# Builds the tinyvmm guest kernel from Debian's linux-source-6.1 package:
# tinyconfig + every guest/kernel/*.config fragment + guest/kernel/patches/*.patch.
# Outputs out/guest/vmlinux (uncompressed ELF with the PVH note, what tinyvmm
# boots) and out/guest/bzImage. Cached: a rebuild happens only when the source
# package, a fragment, a patch or this script changes.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/guest/kernel
out=$repo/out/guest
work=$repo/build/kernel
src_pkg=linux-source-6.1
src_tar=/usr/src/$src_pkg.tar.xz
log=$work/build.log
start=$SECONDS

say() { printf 'kernel: %-52s %5ds\n' "$1" $((SECONDS - start)); }
die() { echo "kernel: error: $*" >&2; exit 1; }
fail_with_log() {
	echo "kernel: error: $1 failed; last lines of $log:" >&2
	tail -n 40 "$log" >&2
	exit 1
}

[[ -r $src_tar ]] || die "$src_tar is missing: run 'apt-get install $src_pkg'"
for tool in make gcc flex bison bc patch sha256sum readelf flock; do
	command -v "$tool" >/dev/null || die "'$tool' is missing: run 'apt-get install build-essential flex bison bc libelf-dev'"
done
version=$(dpkg-query -W -f='${Version}' "$src_pkg" 2>/dev/null) || die "cannot read the version of $src_pkg: is it installed with apt?"

# The bzImage is compressed with LZ4 when the tool exists: it decompresses far
# faster than XZ, which matters when the guest kernel runs emulated.
if command -v lz4 >/dev/null; then compression=LZ4; else compression=GZIP; fi

# Fragments: ours first, then the others in name order (later ones win).
fragments=("$here/tinyvmm.config")
for f in "$here"/*.config; do
	[[ $f == "$here/tinyvmm.config" ]] || fragments+=("$f")
done
shopt -s nullglob
patches=("$here"/patches/*.patch)
shopt -u nullglob

hash_files() { sha256sum "$@" | sed "s|$repo/||" | sha256sum | cut -c1-16; }
patch_key=$( { echo "$version"; hash_files /dev/null "${patches[@]}"; } | sha256sum | cut -c1-16)
key=$( { echo "$version $compression"; hash_files "${BASH_SOURCE[0]}" "${fragments[@]}" "${patches[@]}"; } | sha256sum | cut -c1-16)

up_to_date() { [[ -f $out/kernel.key && $(<"$out/kernel.key") == "$key" && -f $out/vmlinux && -f $out/bzImage ]]; }
if up_to_date; then
	say "up to date (${out#$repo/}/vmlinux, key $key)"
	exit 0
fi
mkdir -p "$work" "$out"

# One build at a time: a second `make guest` waits, then finds the result.
exec 9>"$work/lock"
if ! flock -n 9; then
	say "waiting for another kernel build to finish"
	flock 9
fi
if up_to_date; then
	say "up to date (${out#$repo/}/vmlinux, key $key)"
	exit 0
fi

# One source tree per (package version, patch set); a config change reuses it
# and make rebuilds only what changed.
tree=$work/src-$patch_key/$src_pkg
if [[ ! -f $tree/.tinyvmm-patched ]]; then
	for old in "$work"/src-*; do [[ -e $old ]] && rm -rf "$old"; done
	say "extracting $src_pkg $version"
	tmp=$work/extract.tmp
	rm -rf "$tmp" && mkdir -p "$tmp"
	tar -C "$tmp" -xJf "$src_tar"
	[[ -d $tmp/$src_pkg ]] || die "$src_tar does not contain $src_pkg/"
	for p in "${patches[@]}"; do
		say "patching: $(basename "$p")"
		patch -d "$tmp/$src_pkg" -p1 --batch --forward --quiet <"$p" || die "patch $(basename "$p") does not apply to $src_pkg $version"
	done
	mkdir -p "$(dirname "$tree")"
	mv "$tmp/$src_pkg" "$tree"
	rm -rf "$tmp"
	touch "$tree/.tinyvmm-patched"
fi

jobs=$(nproc)
kmake() { make -C "$tree" -j"$jobs" "$@" >>"$log" 2>&1; }
: >"$log"

say "configuring: tinyconfig + ${#fragments[@]} fragment(s), $compression"
comp_frag=$work/compression.config
{
	for c in GZIP BZIP2 LZMA XZ LZO LZ4 ZSTD; do
		[[ $c == "$compression" ]] && echo "CONFIG_KERNEL_$c=y" || echo "# CONFIG_KERNEL_$c is not set"
	done
} >"$comp_frag"
kmake tinyconfig || fail_with_log "make tinyconfig"
(cd "$tree" && scripts/kconfig/merge_config.sh -m .config "${fragments[@]}" "$comp_frag") >>"$log" 2>&1 ||
	fail_with_log "merge_config.sh"
kmake olddefconfig || fail_with_log "make olddefconfig"

# Kconfig silently drops options whose dependencies are unmet: name them.
dropped=0
while IFS= read -r line; do
	if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
		opt=${BASH_REMATCH[1]} want=${BASH_REMATCH[2]}
	elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
		opt=${BASH_REMATCH[1]} want=n
	else
		continue
	fi
	got=$(grep -E "^$opt=" "$tree/.config" | cut -d= -f2- || true)
	[[ -z $got ]] && got=n
	if [[ $got != "$want" ]]; then
		echo "kernel: warning: $opt=$want did not stick (.config has $got): check its dependencies" >&2
		dropped=$((dropped + 1))
	fi
done < <(cat "${fragments[@]}" "$comp_frag")
say "config checked: $dropped option(s) did not stick"

say "compiling vmlinux and bzImage with -j$jobs (log: ${log#$repo/})"
kmake vmlinux bzImage &
build_pid=$!
while kill -0 "$build_pid" 2>/dev/null; do
	for _ in $(seq 60); do
		sleep 1
		kill -0 "$build_pid" 2>/dev/null || break
	done
	kill -0 "$build_pid" 2>/dev/null && say "  still compiling: $(grep -c '^  [A-Z]' "$log") steps so far"
done
wait "$build_pid" || fail_with_log "make vmlinux bzImage"

readelf -n "$tree/vmlinux" | grep -q 'Xen.*0x00000012' ||
	die "vmlinux has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY): is CONFIG_PVH=y?"
cp "$tree/vmlinux" "$out/vmlinux.tmp" && mv "$out/vmlinux.tmp" "$out/vmlinux"
cp "$tree/arch/x86/boot/bzImage" "$out/bzImage.tmp" && mv "$out/bzImage.tmp" "$out/bzImage"
cp "$tree/.config" "$out/kernel.config"
echo "$key" >"$out/kernel.key"
say "done: ${out#$repo/}/vmlinux $(du -h "$out/vmlinux" | cut -f1), bzImage $(du -h "$out/bzImage" | cut -f1)"
