package vmm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openInput reads a regular file at offsets, and refuses with one line
// naming it a directory, a missing file, a device, a FIFO (at once, though
// no writer ever comes) and a file larger than the guest's memory.
func TestOpenInput(t *testing.T) {
	const limit = 64 << 20
	dir := t.TempDir()
	want := bytes.Repeat([]byte("tinyvmm!"), 1000)
	reg := filepath.Join(dir, "vmlinux")
	if err := os.WriteFile(reg, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, closeF, err := openInput(reg, nil, "kernel", limit)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(inputFile); !ok || f.Size() != int64(len(want)) {
		t.Errorf("a regular file became %T of %d bytes, want an inputFile of %d", f, f.Size(), len(want))
	}
	got := make([]byte, 16)
	if _, err := f.ReadAt(got, 8*500); err != nil || !bytes.Equal(got, want[4000:4016]) {
		t.Errorf("ReadAt got %q, %v", got, err)
	}
	closeF()

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, limit+1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{dir, "cannot read kernel " + dir + ": is a directory"},
		{filepath.Join(dir, "nope"), "cannot read kernel " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"/dev/null", "cannot read kernel /dev/null: is a character device, not a regular file"},
		{fifo, "cannot read kernel " + fifo + ": is a FIFO, not a regular file"},
		{big, "kernel " + big + " (65 MiB) does not fit in 64 MiB of guest memory; raise --mem"},
	} {
		done := make(chan error, 1)
		go func() {
			_, closeF, err := openInput(c.path, nil, "kernel", limit)
			closeF()
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() != c.want {
				t.Errorf("%s: got %v, want %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second): // a refusal takes no time; a blocked open never returns
			t.Errorf("%s: openInput still blocked after 10 s", c.path)
		}
	}
	if f, _, err := openInput(reg, []byte("in memory"), "kernel", limit); err != nil || f.Size() != 9 {
		t.Errorf("data given: the file was used instead (%v)", err)
	}
	if _, _, err := openInput("", make([]byte, 4097), "initrd", 4096); err == nil || !strings.Contains(err.Error(), "does not fit in") {
		t.Errorf("data larger than the limit: %v", err)
	}
}

// The kernel and initrd are copied into guest RAM, not mapped from their
// files: rewriting them in place after the load changes nothing the guest
// sees, and truncating them leaves guest RAM readable (a MAP_PRIVATE map
// of a truncated file raises SIGBUS past its new end, even for pages
// already read through it).
func TestInputsRewrittenOrTruncatedAfterLoad(t *testing.T) {
	const kernelAt = 0x100000 // tinyELF's load address
	dir := t.TempDir()
	rnd := rand.New(rand.NewPCG(1, 2))
	code := make([]byte, 3*pageSize)
	for i := range code {
		code[i] = byte(rnd.Uint32())
	}
	// tinyELF's segment starts at file offset 0x200; move it to a whole page,
	// in step with its address, as a real vmlinux has it.
	elf := tinyELF(code, false)
	kernel := make([]byte, pageSize+len(code))
	copy(kernel, elf[:0x200])
	copy(kernel[pageSize:], code)
	binary.LittleEndian.PutUint64(kernel[64+8:], pageSize)
	initrd := make([]byte, 16*pageSize+123)
	for i := range initrd {
		initrd[i] = byte(rnd.Uint32())
	}
	kpath, ipath := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initrd")
	if err := os.WriteFile(kpath, kernel, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ipath, initrd, 0o644); err != nil {
		t.Fatal(err)
	}
	m := &machine{cfg: Config{Kernel: kpath, Initrd: ipath, MemBytes: 64 << 20, CPUs: 1}}
	defer m.close()
	if _, err := m.loadGuest(); err != nil {
		t.Fatal(err)
	}
	low := m.ram.low
	initrdAt := bytes.Index(low, initrd[:64])
	if initrdAt < 0 {
		t.Fatal("initrd not found in guest RAM")
	}
	check := func(when string) {
		t.Helper()
		if err := equalOrFault(low[kernelAt:kernelAt+len(code)], code); err != nil {
			t.Errorf("%s: kernel in guest RAM: %v", when, err)
		}
		if err := equalOrFault(low[initrdAt:initrdAt+len(initrd)], initrd); err != nil {
			t.Errorf("%s: initrd in guest RAM: %v", when, err)
		}
	}
	check("after the load")
	for _, p := range []string{kpath, ipath} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xee}, int(fi.Size())), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check("after the files were rewritten in place")
	for _, p := range []string{kpath, ipath} {
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	check("after the files were truncated")
}

// equalOrFault compares guest RAM with want, turning a fault on reading it
// (SIGBUS) into an error instead of a crash of the test binary.
func equalOrFault(ram, want []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("reading it faulted at %#x (%v)", f.Addr(), r)
				return
			}
			panic(r)
		}
	}()
	for i := range want {
		if ram[i] != want[i] {
			return fmt.Errorf("byte %#x is %#x, want %#x (the file's bytes, as loaded)", i, ram[i], want[i])
		}
	}
	return nil
}
