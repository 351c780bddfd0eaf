package e2e

import (
	"os"
	"strconv"
	"strings"
)

// backlogDrops is the machine's count of frames the kernel dropped because
// a CPU's input backlog was full (/proc/net/softnet_stat, second column,
// summed over CPUs). It is global, not per namespace: a tx run compares it
// before and after to explain frames that left the VMM but never reached
// the sink.
func backlogDrops() uint64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return 0
	}
	var sum uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 16, 64); err == nil {
			sum += v
		}
	}
	return sum
}
