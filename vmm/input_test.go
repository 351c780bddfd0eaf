package vmm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openInput reads a regular file at offsets, a FIFO whole, and refuses a
// directory or a missing file with one line naming it.
func TestOpenInput(t *testing.T) {
	dir := t.TempDir()
	want := bytes.Repeat([]byte("tinyvmm!"), 1000)
	reg := filepath.Join(dir, "vmlinux")
	if err := os.WriteFile(reg, want, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	go func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Write(want)
			w.Close()
		}
	}()
	for _, path := range []string{reg, fifo} {
		f, closeF, err := openInput(path, nil, "kernel")
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if f.Size() != int64(len(want)) {
			t.Errorf("%s: size %d, want %d", path, f.Size(), len(want))
		}
		got := make([]byte, 16)
		if _, err := f.ReadAt(got, 8*500); err != nil || !bytes.Equal(got, want[4000:4016]) {
			t.Errorf("%s: ReadAt got %q, %v", path, got, err)
		}
		closeF()
	}
	if _, ok := mustOpen(t, reg).(inputFile); !ok {
		t.Error("a regular file was not kept as a file read at offsets")
	}
	for _, c := range []struct{ path, want string }{
		{dir, "cannot read kernel " + dir + ": is a directory"},
		{filepath.Join(dir, "nope"), "cannot read kernel " + filepath.Join(dir, "nope") + ": no such file"},
	} {
		_, _, err := openInput(c.path, nil, "kernel")
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.path, err, c.want)
		}
	}
	if f, _, err := openInput(reg, []byte("in memory"), "kernel"); err != nil || f.Size() != 9 {
		t.Errorf("data given: the file was used instead (%v)", err)
	}
}

func mustOpen(t *testing.T, path string) any {
	t.Helper()
	f, closeF, err := openInput(path, nil, "kernel")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeF)
	return f
}

// A file mapped over guest RAM copy-on-write reads as the file, keeps the
// guest's writes to itself, and counts as resident only where touched.
func TestMapAtOverGuestRAM(t *testing.T) {
	const size = 8 << 20
	ram, err := allocRAM(size)
	if err != nil {
		t.Fatal(err)
	}
	defer ram.free()
	path := filepath.Join(t.TempDir(), "initrd")
	want := bytes.Repeat([]byte("0123456789abcdef"), (4<<20)/16)
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, closeF, err := openInput(path, nil, "initrd")
	if err != nil {
		t.Fatal(err)
	}
	defer closeF()
	before, err := ram.residentBytes()
	if err != nil {
		t.Fatal(err)
	}
	dst := ram.low[4<<20:]
	if err := f.(inputFile).MapAt(dst, 0); err != nil {
		t.Fatal(err)
	}
	if n, _ := ram.residentBytes(); n != before {
		t.Errorf("resident %d bytes after mapping, %d before: the untouched file pages were counted", n, before)
	}
	if !bytes.Equal(dst[:len(want)], want) {
		t.Fatal("mapped RAM differs from the file")
	}
	if n, _ := ram.residentBytes(); n <= before {
		t.Errorf("resident %d bytes after reading the mapping, %d before", n, before)
	}
	dst[0] = 'X'
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Error("a write to guest RAM reached the file")
	}
}
