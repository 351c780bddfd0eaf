package boot

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spyFile is a File that records every read: how many bytes went into
// buffers outside guest RAM, and can fail or lie about its size.
type spyFile struct {
	data     []byte
	low      []byte // guest RAM: reads into it are the loads themselves
	size     int64  // what Size says; len(data) when 0
	fail     error  // returned by every read that covers byte failAt
	failAt   int64
	outside  int // bytes read into buffers outside low
	inside   int // bytes read into low
	maxOther int // the largest read outside low
}

func (f *spyFile) Size() int64 {
	if f.size != 0 {
		return f.size
	}
	return int64(len(f.data))
}

func (f *spyFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fail != nil && off <= f.failAt && f.failAt < off+int64(len(p)) {
		return 0, f.fail
	}
	n, err := bytes.NewReader(f.data).ReadAt(p, off)
	if len(p) > 0 && len(f.low) > 0 && inSlice(f.low, p) {
		f.inside += n
	} else {
		f.outside += n
		f.maxOther = max(f.maxOther, n)
	}
	return n, err
}

func inSlice(outer, p []byte) bool {
	o, q := uintptr(unsafe.Pointer(&outer[0])), uintptr(unsafe.Pointer(&p[0]))
	return q >= o && q+uintptr(len(p)) <= o+uintptr(len(outer))
}

// Load reads the kernel's segments and the initrd straight into guest RAM
// and buffers no more than the headers: a whole-file copy would show as one
// large read outside RAM.
func TestLoadReadsIntoGuestRAM(t *testing.T) {
	big := elfSeg{vaddr: 0xffffffff81000000, paddr: 16 * mib, data: pattern(3*mib, 0x5a)}
	bz := defaultBz()
	bz.pmSize = 2 * mib
	kernels := map[string][]byte{
		"vmlinux": buildELF(16*mib, 16*mib+0x40, big, elfSeg{vaddr: 0xffffffff81400000, paddr: 20 * mib, data: pattern(100, 0x22), memsz: 3 * pageSize}),
		"bzImage": bz.build(),
	}
	if k := readArtifactOptional("TINYVMM_VMLINUX", "out/guest/vmlinux"); k != nil {
		kernels["out/guest/vmlinux"] = k
	}
	for name, k := range kernels {
		t.Run(name, func(t *testing.T) {
			l := newLayout(t, 256*mib, 1)
			kernel := &spyFile{data: k, low: l.Low}
			initrd := &spyFile{data: pattern(mib+123, 9), low: l.Low}
			if _, err := Load(l, Image{Kernel: kernel, Initrd: initrd, Cmdline: "x"}); err != nil {
				t.Fatal(err)
			}
			if kernel.maxOther > elfNotesMax || kernel.outside > 2*elfNotesMax {
				t.Errorf("kernel: %d bytes read outside guest RAM (largest read %d): more than its headers", kernel.outside, kernel.maxOther)
			}
			if kernel.inside < len(k)/2 && name != "out/guest/vmlinux" || kernel.inside == 0 {
				t.Errorf("kernel: only %d of %d bytes read into guest RAM", kernel.inside, len(k))
			}
			if initrd.outside != 0 || initrd.inside != len(initrd.data) {
				t.Errorf("initrd: %d bytes into guest RAM, %d outside; want all %d inside", initrd.inside, initrd.outside, len(initrd.data))
			}
		})
	}
}

// readArtifactOptional is readArtifact without the skip: nil when absent.
func readArtifactOptional(env, def string) []byte {
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join("..", def)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return b
}

// A file that fails to read, or is shorter than its size says (it shrank
// while tinyvmm read it), is a one-line error, whichever part fails.
func TestLoadFileErrors(t *testing.T) {
	k := buildELF(16*mib, 16*mib+0x40, elfText, elfData)
	bz := defaultBz().build()
	eio := errors.New("input/output error")
	cases := []struct {
		name   string
		kernel *spyFile
		initrd *spyFile
		expect string
	}{
		{"ELF header unreadable", &spyFile{data: k, fail: eio}, nil, "cannot read kernel: input/output error"},
		{"ELF segment unreadable", &spyFile{data: k, fail: eio, failAt: 1000}, nil, "cannot read kernel segment 0: input/output error"},
		{"ELF shorter than its size", &spyFile{data: k[:len(k)-300], size: int64(len(k))}, nil, "truncated"},
		{"bzImage shorter than its size", &spyFile{data: bz[:len(bz)-300], size: int64(len(bz))}, nil, "bzImage is truncated"},
		{"bzImage unreadable past the header", &spyFile{data: bz, fail: eio, failAt: 0x3800 + 100}, nil, "cannot read bzImage: input/output error"},
		{"initrd unreadable", &spyFile{data: k}, &spyFile{data: pattern(5000, 1), fail: eio}, "cannot read initrd: input/output error"},
		{"initrd shorter than its size", &spyFile{data: k}, &spyFile{data: pattern(5000, 1), size: 9000}, "initrd is truncated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := Image{Kernel: c.kernel, Cmdline: "x"}
			if c.initrd != nil {
				img.Initrd = c.initrd
			}
			_, err := Load(newLayout(t, 64*mib, 1), img)
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); !strings.Contains(msg, c.expect) || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "boot: ") {
				t.Errorf("error %q, want one line with %q", msg, c.expect)
			}
		})
	}
	_, err := LoadUser(newLayout(t, 64*mib, 1), &spyFile{data: buildELF(0x400000, 0, userText), fail: io.ErrUnexpectedEOF, failAt: 200}, "")
	if err == nil || !strings.Contains(err.Error(), "cannot read user-mode guest segment 0") {
		t.Errorf("user-mode guest: got %v", err)
	}
}

// With a zeroed Layout, Load leaves the pages it would only zero (a bss,
// the command line buffer's tail) untouched: not even faulted in.
func TestZeroedLayoutLeavesZeroPagesAlone(t *testing.T) {
	bss := elfSeg{vaddr: 0xffffffff81200000, paddr: 18 * mib, data: pattern(100, 0x22), memsz: 64 * pageSize}
	l := newLayout(t, 64*mib, 1)
	l.Zeroed = true
	if _, err := Load(l, Image{Kernel: Bytes(buildELF(16*mib, 16*mib+0x40, elfText, bss)), Cmdline: "console=ttyS0"}); err != nil {
		t.Fatal(err)
	}
	if n := residentPages(t, l.Low[18*mib+pageSize:18*mib+64*pageSize]); n != 0 {
		t.Errorf("%d bss pages past the data were touched", n)
	}
	if n := residentPages(t, l.Low[cmdlineAddr+pageSize:cmdlineAddr+cmdlineMax]); n != 0 {
		t.Errorf("%d pages of the command line buffer past the string were touched", n)
	}
	if got := string(l.Low[cmdlineAddr : cmdlineAddr+14]); got != "console=ttyS0\x00" {
		t.Errorf("command line %q", got)
	}
	if !bytes.Equal(l.Low[18*mib:18*mib+100], bss.data) || bytes.ContainsAny(l.Low[18*mib+100:18*mib+64*pageSize], "\x01\x22\xee") {
		t.Error("segment data or bss wrong")
	}
}

func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
