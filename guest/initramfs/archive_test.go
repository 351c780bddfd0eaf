package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
)

// readBack parses a written archive with u-root's reader, without the trailer.
func readBack(t *testing.T, archive []byte) map[string]cpio.Record {
	t.Helper()
	recs, err := cpio.ReadAllRecords(cpio.EOFReader{RecordReader: cpio.Newc.Reader(bytes.NewReader(archive))})
	if err != nil {
		t.Fatalf("reading the archive back: %v", err)
	}
	byName := map[string]cpio.Record{}
	inodes := map[uint64]string{}
	for _, r := range recs {
		if _, dup := byName[r.Name]; dup {
			t.Errorf("%s appears twice", r.Name)
		}
		if dir := path.Dir(r.Name); dir != "." {
			if p, ok := byName[dir]; !ok || p.Mode&cpio.S_IFMT != cpio.S_IFDIR {
				t.Errorf("%s comes before its directory %s (the kernel would skip it)", r.Name, dir)
			}
		}
		if other, dup := inodes[r.Ino]; dup || r.Ino == 0 {
			t.Errorf("%s has inode %d, also %q", r.Name, r.Ino, other)
		}
		inodes[r.Ino] = r.Name
		if r.MTime != 0 || r.UID != 0 || r.GID != 0 {
			t.Errorf("%s is not reproducible: %v", r.Name, r.Info)
		}
		byName[r.Name] = r
	}
	return byName
}

func content(t *testing.T, r cpio.Record) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
	if err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	return b
}

func wantMode(t *testing.T, recs map[string]cpio.Record, name string, mode uint64) cpio.Record {
	t.Helper()
	r, ok := recs[name]
	if !ok {
		t.Fatalf("%s is missing", name)
	}
	if r.Mode != mode {
		t.Errorf("%s has mode %#o, want %#o", name, r.Mode, mode)
	}
	return r
}

func TestArchiveLayout(t *testing.T) {
	s := spec{
		init:    []byte("\x7fELF init"),
		busybox: []byte("\x7fELF busybox"),
		applets: []string{"bin/sh", "/bin/ls", "sbin/ip", "usr/bin/[", "bin/sh", "linuxrc", "bin/busybox", "init", "opt/x/y"},
	}
	recs, err := records(s)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, recs); err != nil {
		t.Fatal(err)
	}
	got := readBack(t, buf.Bytes())

	if b := content(t, wantMode(t, got, "init", cpio.S_IFREG|0o755)); string(b) != string(s.init) {
		t.Errorf("/init content = %q", b)
	}
	if b := content(t, wantMode(t, got, "bin/busybox", cpio.S_IFREG|0o755)); string(b) != string(s.busybox) {
		t.Errorf("/bin/busybox content = %q", b)
	}
	wantMode(t, got, "tmp", cpio.S_IFDIR|0o1777)
	wantMode(t, got, "proc", cpio.S_IFDIR|0o555)
	wantMode(t, got, "etc/passwd", cpio.S_IFREG|0o644)
	if c := wantMode(t, got, "dev/console", cpio.S_IFCHR|0o600); c.Rmajor != 5 || c.Rminor != 1 {
		t.Errorf("/dev/console is %d:%d, want 5:1", c.Rmajor, c.Rminor)
	}
	for _, link := range []string{"bin/sh", "bin/ls", "sbin/ip", "usr/bin/["} {
		r := wantMode(t, got, link, cpio.S_IFLNK|0o777)
		if target := content(t, r); string(target) != "/bin/busybox" {
			t.Errorf("%s -> %q, want /bin/busybox", link, target)
		}
	}
	for _, absent := range []string{"linuxrc", "opt/x/y", "opt"} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s should not be in the archive", absent)
		}
	}
	if !bytes.Contains(buf.Bytes(), []byte(cpio.Trailer)) {
		t.Error("no cpio trailer")
	}
}

func TestArchiveWithoutBusybox(t *testing.T) {
	recs, err := records(spec{init: []byte("pause")})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, recs); err != nil {
		t.Fatal(err)
	}
	got := readBack(t, buf.Bytes())
	wantMode(t, got, "init", cpio.S_IFREG|0o755)
	for name := range got {
		if strings.HasPrefix(name, "bin/") {
			t.Errorf("unexpected %s without busybox", name)
		}
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	s := spec{init: []byte("init"), busybox: []byte("bb"), applets: []string{"bin/sh", "bin/ls"}}
	var a, b bytes.Buffer
	for _, buf := range []*bytes.Buffer{&a, &b} {
		recs, err := records(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeArchive(buf, recs); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two builds of the same input differ")
	}
}

func TestRecordsRejectBadInput(t *testing.T) {
	if _, err := records(spec{}); err == nil {
		t.Error("empty /init accepted")
	}
	if _, err := records(spec{init: []byte("x"), busybox: []byte("bb"), applets: []string{"linuxrc"}}); err == nil {
		t.Error("busybox without usable applets accepted")
	}
}

// TestBuildWithRealBusybox builds an archive from this machine's static
// busybox and checks it with GNU cpio as an independent reader.
func TestBuildWithRealBusybox(t *testing.T) {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		t.Skip("no /bin/busybox (apt-get install busybox-static)")
	}
	dir := t.TempDir()
	initPath := filepath.Join(dir, "init")
	if err := os.WriteFile(initPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "initramfs.cpio")
	n, err := build(initPath, busybox, out)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := readBack(t, archive)
	if len(got) != n {
		t.Errorf("read back %d entries, build reported %d", len(got), n)
	}
	for _, name := range []string{"bin/sh", "bin/ls", "bin/cat", "bin/ping", "bin/mount", "bin/echo", "sbin/ip"} {
		wantMode(t, got, name, cpio.S_IFLNK|0o777)
	}

	gnu, err := exec.LookPath("cpio")
	if err != nil {
		return
	}
	cmd := exec.Command(gnu, "-it", "--quiet")
	cmd.Stdin = bytes.NewReader(archive)
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("GNU cpio cannot list the archive: %v", err)
	}
	if names := strings.Fields(string(list)); len(names) != n {
		t.Errorf("GNU cpio lists %d entries, want %d", len(names), n)
	}
}
