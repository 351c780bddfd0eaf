#!/bin/sh
# bench/nested.sh: the e2e benchmark inside the nested L1 (test/nested), for a
# host without /dev/kvm. tinyvmm, the no-VM ceiling and QEMU (the host's
# binary, put into L1 by -with-qemu, -accel kvm on L1's real /dev/kvm) run in
# L1, interleaved. With NESTED_PROFILE=1, tinyvmm's Go CPU profiles of its
# last tx and rx runs come out through the console as base64 and are shown
# with pprof -top; off by default, since the profiler's signals are exits
# of tinyvmm's vCPU that QEMU does not have.
#
#   bench/nested.sh [bench e2e flags]    # default: --runs 3 --secs 2 --kicks 1,32 --weights 0,256
#   NESTED_SMP=2 bench/nested.sh         # L1 with 2 CPUs (default 1)
#   NESTED_SMP=2 bench/nested.sh --pin   # and each vCPU on a CPU of its own (bench/e2e/README.md)
#   NESTED_PROFILE=1 bench/nested.sh     # and tinyvmm's CPU profiles
#   NESTED_PERF=1 bench/nested.sh        # and perf record -a over the whole bench in L1
#       (the host's perf, apt-get install linux-perf): every thread of L1, kernel included,
#       by thread name (vcpu0, net-IFNAME, "CPU 0/KVM" and qemu-system-x86 for QEMU,
#       tinyvmm for the harness) and symbol, into out/bench/nested-perf.txt
#   NESTED_SWITCHES=1 bench/nested.sh    # and every context switch of L1 recorded (the host's perf,
#       perf record --switch-events: no tracepoints needed), summed per device thread's turn
#       by test/nested/cmd/switchsum into out/bench/nested-switches.txt: whose CPU time a
#       ping's round trip is made of, and how often the device thread preempts a running one
#   NESTED_QEMU_IO_URING=1 bench/nested.sh   # QEMU may use io_uring (default: it is
#       LD_PRELOADed with no-io-uring.so, test/nested/nouring, so it cannot)
#   NESTED_TIMEOUT=90m bench/nested.sh --runs 9 ...   # the runner's bound on the whole run (default 25m)
#   NESTED_FILES=/tmp/tinyvmm-old bench/nested.sh --variant old=bin:/files/tinyvmm-old ...
#       # host files into L1's /files: here another tinyvmm build, run beside this one,
#       # interleaved (an A/B of two builds in one invocation)
#
# The host's iperf3 (apt-get install iperf3) goes into L1 when the host has
# it: bench e2e's Linux-guest cells (linux) need it on L1's side of the tap.
#
# Needs the guest (make guest); builds bin/tinyvmm and bin/tinyvmm-lab.
# Writes out/bench/nested.log and nested-e2e.json (every run's numbers,
# guest kicks and exits included), with NESTED_PROFILE nested-tx.prof and
# nested-rx.prof, and prints the table (and each profile's top 15). Under TCG every column is emulated (both VMMs are
# L1 processes on nested KVM): only the ratios mean anything.
set -eu
cd "$(dirname "$0")/.."
make -s build l0-qemu
mkdir -p out/bench
log=out/bench/nested.log
prof=out/bench/nested-tx.prof
profrx=out/bench/nested-rx.prof
json=out/bench/nested-e2e.json
perftxt=out/bench/nested-perf.txt
swdata=out/bench/nested-switches.data
swtxt=out/bench/nested-switches.txt
[ $# -gt 0 ] || set -- --runs 3 --secs 2 --kicks 1,32 --weights 0,256
[ -n "${NESTED_QEMU_IO_URING:-}" ] || set -- --qemu-preload /usr/lib/tinyvmm/no-io-uring.so "$@"
# nested CMD...: the bench in L1, then the lines that print its output
# files on the console. -stall: a healthy bench prints a line at least
# every ~90 s (one run's bound).
# The runner starts the bench in /files when there are files, so the
# repository's paths (/repo in L1) are spelled out.
l1repo=/repo
files=
for f in ${NESTED_FILES:-}; do files="$files -file $f"; done
set -- --guest $l1repo/out/guest/bench.elf --tinyvmm $l1repo/bin/tinyvmm --out $l1repo/out/bench "$@"
nested() {
	bin/tinyvmm-lab nested -lab -with-qemu ${NESTED_PERF:+-perf} -smp "${NESTED_SMP:-1}" -stall 3m \
		-timeout "${NESTED_TIMEOUT:-25m}" $(command -v iperf3 >/dev/null && echo -tool iperf3) $files \
		-run 'busybox echo NESTED-JSON-BEGIN' -run "busybox cat $l1repo/out/bench/e2e.json" -run 'busybox echo NESTED-JSON-END' "$@"
}
rm -f "$prof" "$profrx" "$perftxt" "$swdata" "$swtxt"
status=0
if [ -n "${NESTED_SWITCHES:-}" ]; then
	nested -perf-switches -- bench e2e "$@" >"$log" 2>&1 || status=$?
elif [ -n "${NESTED_PROFILE:-}" ]; then
	# find -exec: a profile whose cells did not run (--only) is no failure.
	nested -run 'busybox echo NESTED-PROF-BEGIN' -run 'busybox find /tmp -maxdepth 1 -name tx.prof -exec busybox base64 {} ;' -run 'busybox echo NESTED-PROF-END' \
		-run 'busybox echo NESTED-PROFRX-BEGIN' -run 'busybox find /tmp -maxdepth 1 -name tx.prof.rx -exec busybox base64 {} ;' -run 'busybox echo NESTED-PROFRX-END' \
		-- bench e2e --cpuprofile /tmp/tx.prof "$@" >"$log" 2>&1 || status=$?
else
	nested -- bench e2e "$@" >"$log" 2>&1 || status=$?
fi
tr -d '\r' <"$log" | sed -n '/^tinyvmm bench e2e,/,/^wrote /p'
# between NAME: the console lines between NESTED-NAME-BEGIN and -END,
# without l1init's NESTED-STEP reports (one follows a file's last line
# directly when the file does not end in a newline) and the runner's own
# "nested: " lines, which it may print in the middle of a file.
between() {
	tr -d '\r' <"$log" | awk -v b="NESTED-$1-BEGIN" -v e="NESTED-$1-END" '$0==e{p=0} p{print} $0==b{p=1}' |
		sed -e '/^NESTED-STEP /d' -e '/^nested: /d' -e 's/NESTED-STEP status=.*$//'
}
between PROF | grep -E '^[A-Za-z0-9+/=]+$' | base64 -d >"$prof" || true
between PROFRX | grep -E '^[A-Za-z0-9+/=]+$' | base64 -d >"$profrx" || true
between JSON >"$json" || true
if [ -n "${NESTED_SWITCHES:-}" ]; then
	if between SWITCHES | grep -E '^[A-Za-z0-9+/=]+$' | base64 -d | gunzip >"$swdata" && [ -s "$swdata" ] &&
		go run ./test/nested/cmd/switchsum -data "$swdata" >"$swtxt"; then
		echo "== $swtxt"
		cat "$swtxt"
	else
		echo "bench/nested.sh: no switch record in $log" >&2
	fi
fi
if [ -n "${NESTED_PERF:-}" ]; then
	# L1 has no kallsyms: perfsum names kernel addresses from vmlinux.
	if between PERF | go run ./test/nested/cmd/perfsum -vmlinux out/guest/vmlinux >"$perftxt"; then
		echo "== $perftxt"
		head -50 "$perftxt"
	else
		echo "bench/nested.sh: no perf report in $log" >&2
	fi
fi
for p in "$prof" "$profrx"; do
	if [ -s "$p" ]; then
		echo "== $p"
		go tool pprof -top -nodecount=15 "$p" # Go profiles carry their symbols
	elif [ -n "${NESTED_PROFILE:-}" ]; then
		echo "bench/nested.sh: no profile $p in $log" >&2
	fi
done
[ "$status" -eq 0 ] || echo "bench/nested.sh: nested run failed (status $status); see $log" >&2
exit "$status"
