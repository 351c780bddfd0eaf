package nested

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNoIOURingKeepsQEMUOffIOURing builds no_io_uring.so as Assemble does
// and starts the host's QEMU under strace until its QMP greeting (its
// main loop is up): without the library QEMU calls io_uring_setup, with it
// LD_PRELOADed it never does.
func TestNoIOURingKeepsQEMUOffIOURing(t *testing.T) {
	for _, tool := range []string{QEMUBinary, "strace", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "no-io-uring.so")
	if msg, err := exec.Command("cc", "-shared", "-fPIC", "-nostdlib", "-O2", "-Wall", "-o", so, "nouring/no_io_uring.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, msg)
	}
	setups := func(preload string) int {
		trace := filepath.Join(dir, "trace")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := []string{"-f", "-qq", "-e", "trace=io_uring_setup", "-o", trace}
		if preload != "" {
			args = append(args, "-E", "LD_PRELOAD="+preload)
		}
		args = append(args, QEMUBinary, "-M", "none", "-nodefaults", "-display", "none", "-qmp", "stdio")
		cmd := exec.CommandContext(ctx, "strace", args...)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		greeting, _ := bufio.NewReader(out).ReadString('\n')
		io.WriteString(in, `{"execute":"qmp_capabilities"}`+"\n"+`{"execute":"quit"}`+"\n")
		go io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil || !strings.Contains(greeting, "QMP") {
			t.Fatalf("QEMU under strace: %v, first line %q", err, greeting)
		}
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "io_uring_setup(")
	}
	if n := setups(""); n == 0 {
		t.Skip("this QEMU sets up no io_uring even without the library: nothing to test")
	}
	if n := setups(so); n != 0 {
		t.Errorf("with %s preloaded QEMU called io_uring_setup %d times", so, n)
	}
}
