package ptytest

import (
	"os/exec"
	"testing"
	"time"
)

// A shell on the pty sees a terminal in cooked mode, reads a typed line
// and prints it; stty changes the mode the test then reads back.
func TestShellOnPTY(t *testing.T) {
	p, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before, err := p.Termios()
	if err != nil {
		t.Fatal(err)
	}
	if IsRaw(before) {
		t.Fatalf("a new pty is raw: %+v", before)
	}
	cmd := exec.Command("/bin/sh", "-c", `[ -t 0 ] && [ -t 1 ] && echo tty-ok; read x; echo "got-$x"; stty raw -echo; echo raw-done; read y`)
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := p.Expect("tty-ok", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Type("abc\r") // cooked mode turns Enter's \r into \n
	if err := p.Expect("got-abc", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Expect("raw-done", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	raw, err := p.Termios()
	if err != nil {
		t.Fatal(err)
	}
	if !IsRaw(raw) || Diff(before, raw) == "" {
		t.Fatalf("after stty raw: raw %v, diff %q", IsRaw(raw), Diff(before, raw))
	}
	if err := p.Expect("never printed", 50*time.Millisecond); err == nil {
		t.Fatal("Expect found text that was never printed")
	}
}
