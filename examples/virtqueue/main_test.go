package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"tinyvmm/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// TestVirtqueue runs the example and checks the frame's round trip and
// the device's trace, event by event and in order.
func TestVirtqueue(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	text := out.String()
	// A kick is the driver's to skip when the device, still running, has
	// notifications off (EVENT_IDX): it then finds the chain without one.
	wantKicks := map[string]int{"tx": 1, "rx": 1}
	for q := range wantKicks {
		if strings.Contains(text, "kick "+q+": false") {
			wantKicks[q] = 0
		}
	}
	for _, want := range []string{
		"host:   read 67 bytes: the header and the frame, unchanged",
		"driver: tx interrupt; used element id 0 len 0",
		`driver: rx interrupt; used element id 0 len 67: UDP from 10.0.2.1 port 7: "hello, device"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// A kick is counted when the worker reads its eventfd, which may come
	// after it served the chain; the example waits for every kick sent
	// before it takes the counters and the trace, so they are exact.
	var tf, tk, ti, rf, rk, ri int
	if _, err := fmt.Sscanf(text[strings.Index(text, "device counters:"):],
		"device counters: tx %d frame(s) %d kick(s) %d interrupt(s); rx %d frame(s) %d kick(s) %d interrupt(s)",
		&tf, &tk, &ti, &rf, &rk, &ri); err != nil {
		t.Fatalf("device counters line: %v\n%s", err, text)
	}
	if tf != 1 || ti != 1 || rf != 1 || ri != 1 || tk != wantKicks["tx"] || rk != wantKicks["rx"] {
		t.Errorf("device counters: tx %d frames %d kicks %d irqs, rx %d frames %d kicks %d irqs; want 1 frame, 1 interrupt and the kicks sent %v",
			tf, tk, ti, rf, rk, ri, wantKicks)
	}
	_, trace, _ := strings.Cut(text, "device trace")
	events := regexp.MustCompile(`(?m)^  \+\d+\.\d{6} (.*)$`).FindAllStringSubmatch(trace, -1)
	// A kick only wakes the worker, which serves the ring: it may find a
	// chain before it reads the kick (its first look at start, or woken by
	// the backend), so kicks are counted (exactly those sent), and the
	// rest must come in this order.
	var got []string
	kicks := map[string]int{}
	for _, e := range events {
		if q, ok := strings.CutSuffix(e[1], " kick"); ok {
			kicks[q]++
			continue
		}
		got = append(got, e[1])
	}
	want := []string{
		"tx pop head=0 bufs=2", "tx writev 1", "tx used published", "tx irq",
		"rx popped chains=4", "rx batch 1", "rx used published", "rx irq",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || kicks["tx"] != wantKicks["tx"] || kicks["rx"] != wantKicks["rx"] {
		t.Errorf("trace events:\n%s\nwant:\n%s\nand kicks %v, got %v", strings.Join(got, "\n"), strings.Join(want, "\n"), wantKicks, kicks)
	}
}
