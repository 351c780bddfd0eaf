package main

import (
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
	for _, want := range []string{
		"host:   read 67 bytes: the header and the frame, unchanged",
		"driver: tx interrupt; used element id 0 len 0",
		`driver: rx interrupt; used element id 0 len 67: UDP from 10.0.2.1 port 7: "hello, device"`,
		"device counters: tx 1 frame(s) 1 kick(s) 1 interrupt(s); rx 1 frame(s) 1 kick(s) 1 interrupt(s)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	_, trace, _ := strings.Cut(text, "device trace")
	events := regexp.MustCompile(`(?m)^  \+\d+\.\d{6} (.*)$`).FindAllStringSubmatch(trace, -1)
	var got []string
	for _, e := range events {
		got = append(got, e[1])
	}
	want := []string{
		"tx kick", "tx pop head=0 bufs=2", "tx writev 1", "tx used published", "tx irq",
		"rx kick", "rx batch 1", "rx used published", "rx irq",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("trace events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
