package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A dynamically linked program whose loader is missing fails to start with
// ENOENT, as if the program itself were missing; the error must name the
// loader instead.
func TestStartErrorNamesMissingInterpreter(t *testing.T) {
	const realInterp = "/lib64/ld-linux-x86-64.so.2"
	const fakeInterp = "/nonexist/ld-linux-x86-64.2" // same length: patched in place
	src, err := os.ReadFile("/bin/true")
	if err != nil || !bytes.Contains(src, []byte(realInterp+"\x00")) {
		t.Skipf("no dynamically linked /bin/true with %s here", realInterp)
	}
	prog := filepath.Join(t.TempDir(), "dyn.test")
	patched := bytes.Replace(src, []byte(realInterp), []byte(fakeInterp), 1)
	if err := os.WriteFile(prog, patched, 0o755); err != nil {
		t.Fatal(err)
	}
	_, startErr := os.StartProcess(prog, []string{prog}, &os.ProcAttr{})
	if startErr == nil {
		t.Fatal("a program with a missing interpreter started")
	}
	msg := explainStartError(prog, startErr).Error()
	for _, want := range []string{"dynamically linked", fakeInterp, "CGO_ENABLED=0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

// A static program, or one whose loader exists, keeps the plain error.
func TestStartErrorLeavesOtherErrorsAlone(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	_, startErr := os.StartProcess(missing, []string{missing}, &os.ProcAttr{})
	if got := explainStartError(missing, startErr); got != startErr {
		t.Errorf("missing program: got %v, want the start error itself", got)
	}
	if interp, err := elfInterpreter("/bin/true"); err == nil && interp != "" {
		if _, err := os.Stat(interp); err == nil {
			if got := explainStartError("/bin/true", os.ErrNotExist); got != os.ErrNotExist {
				t.Errorf("present interpreter: got %v", got)
			}
		}
	}
}
