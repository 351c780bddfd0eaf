#!/bin/sh
# bench/boot.sh: `tinyvmm-lab bench boot` inside the nested L1 (test/nested), for
# a host without a /dev/kvm that runs Linux user space. tinyvmm, QEMU -M
# microvm and QEMU q35 (the host's binary, put into L1 by -with-qemu) boot the
# default guest on L1's real /dev/kvm, interleaved, with L1's kvmprobe as the
# floor (--floor: a Go program's spawn to its first KVM_RUN); boot.json comes out
# through the console and the table and boot.png are made again here.
#
#   bench/boot.sh [bench boot flags]     # default: --runs 9
#   NESTED_SMP=2 bench/boot.sh           # L1 with 2 CPUs (default 1)
#
# Writes out/bench/boot-nested.log, out/bench/boot.json and boot.png. Under
# TCG every VMM is an L1 process on nested KVM: times are L1's, so compare
# systems within one run, not with hardware.
set -eu
cd "$(dirname "$0")/.."
mkdir -p out/bench
log=out/bench/boot-nested.log
json=out/bench/boot.json
status=0
make -s build
bin/tinyvmm-lab nested -lab -with-qemu -smp "${NESTED_SMP:-1}" -probe-exits 1000 \
	-run 'busybox echo NESTED-JSON-BEGIN' -run 'busybox cat out/bench/boot.json' -run 'busybox echo NESTED-JSON-END' \
	-- bench boot --floor /bin/kvmprobe "$@" >"$log" 2>&1 || status=$?
tr -d '\r' <"$log" | sed -n '/^bench boot: /p'
tr -d '\r' <"$log" | awk '$0=="NESTED-JSON-END"{p=0} p{print} $0=="NESTED-JSON-BEGIN"{p=1}' |
	sed -e '/^NESTED-STEP /d' -e 's/NESTED-STEP status=.*$//' >"$json.tmp" || true
if [ -s "$json.tmp" ]; then
	mv "$json.tmp" "$json"
	bin/tinyvmm-lab bench boot --report "$json"
else
	rm -f "$json.tmp"
	echo "bench/boot.sh: no boot.json in $log" >&2
	[ "$status" -ne 0 ] || status=1
fi
[ "$status" -eq 0 ] || echo "bench/boot.sh: nested run failed (status $status); see $log" >&2
exit "$status"
