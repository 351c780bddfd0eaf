#!/bin/sh
# bench/nested.sh: the e2e benchmark inside the nested L1 (test/nested), for a
# host without /dev/kvm. tinyvmm and the no-VM ceiling run in L1 (QEMU is not
# there, so its column is skipped); tinyvmm's Go CPU profile of its last tx
# run comes out through the console as base64 and is shown with pprof -top.
#
#   bench/nested.sh [bench e2e flags]    # default: --runs 3 --secs 2 --kicks 1,32 --weights 0,256
#
# Writes out/bench/nested.log, out/bench/nested-tx.prof and prints the table
# and the profile's top 15. Under TCG both columns are emulated: only the
# tinyvmm/ceiling ratio means anything.
set -eu
cd "$(dirname "$0")/.."
mkdir -p out/bench
log=out/bench/nested.log
prof=out/bench/nested-tx.prof
[ $# -gt 0 ] || set -- --runs 3 --secs 2 --kicks 1,32 --weights 0,256
status=0
go run ./test/nested/cmd/nested \
	-run 'busybox echo NESTED-PROF-BEGIN' -run 'busybox base64 /tmp/tx.prof' -run 'busybox echo NESTED-PROF-END' \
	-- bench e2e --cpuprofile /tmp/tx.prof "$@" >"$log" 2>&1 || status=$?
tr -d '\r' <"$log" | sed -n '/^tinyvmm bench e2e,/,/^wrote /p'
# Between the markers: the base64 lines (l1init's NESTED-STEP lines are there too).
tr -d '\r' <"$log" | awk '$0=="NESTED-PROF-END"{p=0} p{print} $0=="NESTED-PROF-BEGIN"{p=1}' |
	grep -E '^[A-Za-z0-9+/=]+$' | base64 -d >"$prof" || true
if [ -s "$prof" ]; then
	go tool pprof -top -nodecount=15 "$prof" # Go profiles carry their symbols
else
	echo "bench/nested.sh: no profile in $log" >&2
fi
[ "$status" -eq 0 ] || echo "bench/nested.sh: nested run failed (status $status); see $log" >&2
exit "$status"
