#!/bin/bash
# tinyvmm-lab bench share in the nested L1 (real KVM): writes out/bench/share.json
# (headline keys: --share-cache=always, the CI recipes' path; auto_* the default's;
# host_parallel_speedup the host's own 4 readers over 1, the CPUs' ceiling)
# and the log out/bench/share-nested.log. Arguments go to bench share
# (default --runs 5 --qemu-runs 1 --qemu-timeout 4m: the anchor's 9p is slow). NESTED_SMP sets L1's CPUs (default 4: the guest gets
# 4 vCPUs for the parallel readers); NESTED_ARGS adds runner flags (say,
# -pkg ./vmm to run tests in the same boot). Serialize with other nested
# runs: flock /tmp/nested.lock bench/share-nested.sh
set -eu
cd "$(dirname "$0")/.."
mkdir -p out/bench
log=out/bench/share-nested.log
json=out/bench/share.json
[ $# -gt 0 ] || set -- --runs 5 --qemu-runs 1 --qemu-timeout 4m
status=0
make -s build l0-qemu
# shellcheck disable=SC2086
bin/tinyvmm-lab nested -lab -with-qemu -smp "${NESTED_SMP:-4}" -mem 3072 -stall 3m -timeout 60m -test-timeout 30m ${NESTED_ARGS:-} \
	-run 'busybox echo NESTED-JSON-BEGIN' -run 'busybox cat out/bench/share.json' -run 'busybox echo NESTED-JSON-END' \
	-- bench share "$@" >"$log" 2>&1 || status=$?
tr -d '\r' <"$log" | sed -n '/^tinyvmm bench share:/,/^wrote /p'
tr -d '\r' <"$log" | awk '$0=="NESTED-JSON-END"{p=0} p{print} $0=="NESTED-JSON-BEGIN"{p=1}' |
	sed -e '/^NESTED-STEP /d' -e 's/NESTED-STEP status=.*$//' >"$json.tmp" || true
if [ -s "$json.tmp" ]; then mv "$json.tmp" "$json"; echo "wrote $json"; else rm -f "$json.tmp"; fi
[ "$status" -eq 0 ] || echo "bench/share-nested.sh: nested run failed (status $status); see $log" >&2
exit "$status"
