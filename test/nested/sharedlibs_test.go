package nested

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
)

// fakeELFs plays a file system of ELF files for libResolver.
type fakeELFs map[string]elfDeps

func (f fakeELFs) read(p string) (elfDeps, error) {
	d, ok := f[p]
	if !ok {
		return d, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return d, nil
}

func lib64(needed ...string) elfDeps {
	return elfDeps{Needed: needed, Class: elf.ELFCLASS64, Machine: elf.EM_X86_64}
}

func TestResolverFollowsNeededLikeTheLoader(t *testing.T) {
	exe := lib64("libA.so.1", "libc.so.6")
	exe.Interp = "/lib64/ld-linux-x86-64.so.2"
	exe.RunPath = []string{"$ORIGIN/../lib/app"}
	libA := lib64("libB.so.2", "libc.so.6")
	libA.RunPath = []string{"${ORIGIN}/private"}
	files := fakeELFs{
		"/opt/app/bin/app":                   exe,
		"/lib64/ld-linux-x86-64.so.2":        lib64(),
		"/opt/app/lib/app/libA.so.1":         libA,
		"/opt/app/lib/app/private/libB.so.2": lib64("libc.so.6", "libA.so.1", "ld-linux-x86-64.so.2"), // a cycle, and the loader by soname
		// The first directory holds a 32-bit libc: the loader passes over it.
		"/lib/x86_64-linux-gnu/libc.so.6":     {Class: elf.ELFCLASS32, Machine: elf.EM_386},
		"/usr/lib/x86_64-linux-gnu/libc.so.6": lib64("ld-linux-x86-64.so.2"),
	}
	got, err := libResolver{dirs: loaderDirs, read: files.read}.resolve("/opt/app/bin/app")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/lib64/ld-linux-x86-64.so.2",
		"/opt/app/lib/app/libA.so.1",
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/opt/app/lib/app/private/libB.so.2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("resolved\n  %v\nwant\n  %v", got, want)
	}
}

func TestResolverNamesTheMissingLibraryAndItsNeeder(t *testing.T) {
	files := fakeELFs{
		"/usr/bin/qemu":                          lib64("libglib-2.0.so.0"),
		"/lib/x86_64-linux-gnu/libglib-2.0.so.0": lib64("libpcre2-8.so.0"),
	}
	_, err := libResolver{dirs: loaderDirs, read: files.read}.resolve("/usr/bin/qemu")
	if err == nil || !strings.Contains(err.Error(), "libpcre2-8.so.0 (needed by /lib/x86_64-linux-gnu/libglib-2.0.so.0): not found") {
		t.Fatalf("err = %v, want libpcre2-8.so.0 not found, needed by libglib", err)
	}
}

// TestSharedLibrariesMatchesLdd resolves a real dynamic executable of this
// host and compares with what ldd (the real loader, with its cache) says.
func TestSharedLibrariesMatchesLdd(t *testing.T) {
	ldd, err := exec.LookPath("ldd")
	if err != nil {
		t.Skip("no ldd on this machine")
	}
	bin := ""
	for _, name := range []string{QEMUBinary, "ls", "sh"} {
		if p, err := exec.LookPath(name); err == nil {
			if d, err := readELFDeps(p); err == nil && d.Interp != "" {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Skip("no dynamic executable (qemu, ls, sh) to resolve on this machine")
	}
	out, err := exec.Command(ldd, bin).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", bin, err)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			want = append(want, realPath(t, f[2]))
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"): // the loader
			want = append(want, realPath(t, f[0]))
		}
	}
	libs, err := SharedLibraries(bin)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range libs {
		got = append(got, realPath(t, l))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: SharedLibraries (real paths)\n  %v\nldd\n  %v", bin, got, want)
	}
}

func realPath(t *testing.T, p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestQEMUDataFilesFollowsLinksIntoOtherPackages builds a QEMU-like tree
// where share/qemu links into share/seabios, as Debian's packages do, and
// checks each file is found first in QEMU's order and reaches the
// initramfs with the linked contents.
func TestQEMUDataFilesFollowsLinksIntoOtherPackages(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/share/seabios/bios-256k.bin", "seabios")
	write("usr/share/qemu/pvh.bin", "pvh")
	write("usr/lib/ipxe/qemu/efi-virtio.rom", "ipxe")
	write("usr/share/seabios/pvh.bin", "not this one: share/qemu comes first")
	if err := os.Symlink("../seabios/bios-256k.bin", filepath.Join(root, "usr/share/qemu/bios-256k.bin")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "usr/bin/qemu-system-x86_64")

	files, err := qemuDataFiles(bin, []string{"bios-256k.bin", "pvh.bin", "efi-virtio.rom"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteInitramfs(&buf, files, nil); err != nil {
		t.Fatal(err)
	}
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(buf.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range records {
		if r.Mode&cpio.S_IFMT == cpio.S_IFREG && r.Name != "plan" {
			b := make([]byte, r.FileSize)
			if _, err := r.ReadAt(b, 0); err != nil && r.FileSize > 0 {
				t.Fatal(err)
			}
			got["/"+r.Name] = fmt.Sprintf("%s (mode %o)", b, r.Mode&0o777)
		}
	}
	for dest, want := range map[string]string{
		"usr/share/qemu/bios-256k.bin":     "seabios (mode 644)",
		"usr/share/qemu/pvh.bin":           "pvh (mode 644)",
		"usr/lib/ipxe/qemu/efi-virtio.rom": "ipxe (mode 644)",
	} {
		if g := got[filepath.Join(root, dest)]; g != want {
			t.Errorf("%s in the initramfs = %q, want %q", dest, g, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("initramfs has %d files, want 3: %v", len(got), got)
	}

	_, err = qemuDataFiles(bin, []string{"kvmvapic.bin"})
	if err == nil || !strings.Contains(err.Error(), "no kvmvapic.bin in "+filepath.Join(root, "usr/bin")) {
		t.Errorf("missing file: err = %v", err)
	}
}

// A tool goes into L1 at its own path with its libraries, each file once.
func TestToolFiles(t *testing.T) {
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("no iperf3 (apt-get install iperf3): a dynamic tool to look at")
	}
	files, err := ToolFiles([]string{"iperf3", iperf}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.Dest] || f.Src != f.Dest {
			t.Errorf("file %+v: twice, or not at its own path", f)
		}
		seen[f.Dest] = true
	}
	if !seen[iperf] || len(files) < 3 {
		t.Errorf("files %v: want %s, its loader and libraries", files, iperf)
	}
	if _, err := ToolFiles([]string{"no-such-tool-here"}, t.Logf); err == nil {
		t.Error("a missing tool: no error")
	}
}
