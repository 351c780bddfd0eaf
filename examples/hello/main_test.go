package main

import (
	"strings"
	"testing"

	"tinyvmm/examples/internal/exampletest"
	"tinyvmm/kvm"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

func TestHello(t *testing.T) {
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"KVM_RUN returned: KVM_EXIT_HLT\n",
		"2 + 3 = 5 (AX) and halted at RIP 0x107\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}
