package e2e

import "testing"

func TestHostTSCkHz(t *testing.T) {
	khz := HostTSCkHz()
	if khz < 100_000 || khz > 10_000_000 {
		t.Fatalf("host TSC at %d kHz: outside 0.1-10 GHz", khz)
	}
	t.Logf("host TSC %d kHz", khz)
}
