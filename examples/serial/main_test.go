package main

import (
	"fmt"
	"strings"
	"testing"

	"tinyvmm/examples/internal/exampletest"
	"tinyvmm/kvm"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

func TestSerial(t *testing.T) {
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	var out strings.Builder
	status, err := run(&out)
	if err != nil || status != 0 {
		t.Fatalf("status %d, err %v\noutput:\n%s", status, err, out.String())
	}
	// One IN (the LSR poll finds the transmitter empty at once) and one
	// OUT per byte, and the OUT to the exit port.
	n := len(message)
	want := message + fmt.Sprintf("guest wrote 0 to the exit port 0x501 after %d KVM_EXIT_IO exits (%d IN from the LSR, %d OUT)\n", 2*n+1, n, n+1)
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestGuestCodeEndsWithMessage(t *testing.T) {
	code := guestCode()
	if !strings.HasSuffix(string(code), message+"\x00") {
		t.Fatalf("code does not end with the NUL-terminated message")
	}
	msgAt := codeAt + len(code) - len(message) - 1
	if got := int(code[1]) | int(code[2])<<8; got != msgAt {
		t.Errorf("mov si points at %#x, message is at %#x", got, msgAt)
	}
}
