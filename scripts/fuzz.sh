#!/usr/bin/env bash
# One fuzz target for make fuzz:  scripts/fuzz.sh PKG TARGET BUDGET
#
# Runs TARGET of package PKG for BUDGET, a count of executions such as 20000x (what make fuzz
# gives), or for $FUZZTIME when that is set (make fuzz FUZZTIME=5m: a soak).
#
# A duration budget can fail with nothing found: when it expires while a worker is busy, Go's
# fuzz coordinator (before Go 1.27) reports its own "context deadline exceeded" as the target's
# failure (go.dev/issue/75804). That one failure is forgiven, only when the target printed
# nothing else and no new reproducer appeared in PKG/testdata/fuzz/TARGET. A count budget has
# no deadline to race. Any other failure (a reproducer, a crash, a build error) fails, and so
# does a TARGET that PKG does not have (go test would pass, having fuzzed nothing).
set -uo pipefail

if [ $# -ne 3 ]; then
	echo "usage: $0 PKG TARGET BUDGET" >&2
	exit 2
fi
pkg=$1 target=$2 budget=${FUZZTIME:-$3}
go=${GO:-go}
corpus=${pkg%/}/testdata/fuzz/$target

listing() { ls -A "$corpus" 2>/dev/null; }
before=$(listing)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$go" test -run='^$' -fuzz="^$target\$" -fuzztime="$budget" "$pkg" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if grep -q '^testing: warning: no fuzz tests to fuzz' "$out"; then
	# go test passes when -fuzz matches nothing: a renamed or moved target would fuzz nothing.
	echo "fuzz.sh: no fuzz target $target in $pkg" >&2
	exit 1
fi
[ "$status" -eq 0 ] && exit 0

# The race's whole report is the target's FAIL line and the bare error under it; anything
# more (a "Failing input written", a panic, a subtest's FAIL) is a real failure.
report=$(grep -v -e '^fuzz: ' -e '^FAIL' -e '^exit status ' -e '^--- FAIL: '"$target"' (' "$out")
if [ "$(listing)" = "$before" ] &&
	grep -q -e '^--- FAIL: '"$target"' (' "$out" &&
	[ "$report" = "    context deadline exceeded" ]; then
	echo "fuzz.sh: $target: Go's fuzzing deadline race at the end of -fuzztime=$budget" \
		"(go.dev/issue/75804), no reproducer written: passed" >&2
	exit 0
fi
exit "$status"
