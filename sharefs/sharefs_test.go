package sharefs

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// newShare makes a share dir and, beside it, an outside dir with a secret
// that no operation may reach.
func newShare(t *testing.T) (*Share, string, string) {
	t.Helper()
	base := t.TempDir()
	dir, outside := filepath.Join(base, "share"), filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir, outside
}

func root(t *testing.T, s *Share) *File {
	f, err := s.Attach()
	if err != nil {
		t.Fatal(err)
	}
	return f.(*File)
}

func walk(t *testing.T, f *File, names ...string) (*File, error) {
	t.Helper()
	_, c, err := f.Walk(names)
	if err != nil {
		return nil, err
	}
	return c.(*File), nil
}

func TestSymlinksNeverFollowed(t *testing.T) {
	s, dir, outside := newShare(t)
	r := root(t, s)
	for name, target := range map[string]string{"abs": outside, "rel": "../outside", "root": "/"} {
		if _, err := r.Symlink(target, name, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "hostlink")) // made on the host side
	for _, names := range [][]string{{"abs", "secret"}, {"rel", "secret"}, {"root", "etc"}} {
		if _, err := walk(t, r, names...); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("walk %v: got %v, want ELOOP or ENOTDIR", names, err)
		}
	}
	for _, name := range []string{"abs", "hostlink", "root"} {
		f, err := walk(t, r, name)
		if err != nil {
			t.Fatalf("walk %s (the link itself): %v", name, err)
		}
		if _, _, err := f.Open(p9.ReadOnly); err == nil {
			buf := make([]byte, 16)
			n, _ := f.ReadAt(buf, 0)
			t.Errorf("open %s through the symlink succeeded, read %q", name, buf[:n])
		}
		if err := f.SetAttr(p9.SetAttrMask{Size: true}, p9.SetAttr{}); err == nil {
			t.Errorf("truncate through symlink %s succeeded", name)
		}
		if err := f.SetAttr(p9.SetAttrMask{Permissions: true}, p9.SetAttr{Permissions: 0o777}); err == nil {
			t.Errorf("chmod through symlink %s succeeded", name)
		}
	}
	if got, err := mustWalk(t, r, "abs").Readlink(); err != nil || got != outside {
		t.Errorf("readlink abs = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Errorf("outside secret changed: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(outside, "secret")); fi.Mode().Perm() != 0o644 {
		t.Errorf("outside secret's mode changed: %v", fi.Mode())
	}
}

func mustWalk(t *testing.T, f *File, names ...string) *File {
	t.Helper()
	c, err := walk(t, f, names...)
	if err != nil {
		t.Fatalf("walk %v: %v", names, err)
	}
	return c
}

func TestDotDotAndSlashRefused(t *testing.T) {
	s, _, _ := newShare(t)
	r := root(t, s)
	for _, name := range []string{"..", ".", "", "a/b", "/etc", "x\x00y"} {
		if _, err := walk(t, r, name); err == nil {
			t.Errorf("walk %q succeeded", name)
		}
		if _, _, _, err := r.Create(name, p9.ReadWrite, 0o644, 0, 0); err == nil {
			t.Errorf("create %q succeeded", name)
		}
		if _, err := r.Mkdir(name, 0o755, 0, 0); err == nil {
			t.Errorf("mkdir %q succeeded", name)
		}
		if err := r.UnlinkAt(name, 0); err == nil {
			t.Errorf("unlink %q succeeded", name)
		}
		if err := r.RenameAt(name, r, "x"); err == nil {
			t.Errorf("rename %q succeeded", name)
		}
	}
	// A relative path with .. inside a single walk name is refused too;
	// the server splits names, and sharefs never joins more than one.
	if _, err := walk(t, r, "sub", ".."); err == nil {
		t.Error("walk sub/.. succeeded")
	}
}

// TestSymlinkRace swaps a directory for a symlink to the outside while
// walks and opens go on; none may ever see the outside secret.
func TestSymlinkRace(t *testing.T) {
	s, dir, outside := newShare(t)
	r := root(t, s)
	d := filepath.Join(dir, "d")
	os.Mkdir(d, 0o755)
	os.WriteFile(filepath.Join(d, "secret"), []byte("inside"), 0o644)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmpDir, tmpLink := filepath.Join(dir, "d.dir"), filepath.Join(dir, "d.link")
		os.Symlink(outside, tmpLink)
		for !stop.Load() {
			os.Rename(d, tmpDir)
			os.Rename(tmpLink, d)
			os.Rename(d, tmpLink)
			os.Rename(tmpDir, d)
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	tries := 0
	for ; time.Now().Before(deadline); tries++ {
		f, err := walk(t, r, "d", "secret")
		if err != nil {
			continue
		}
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			continue
		}
		buf := make([]byte, 16)
		n, _ := f.ReadAt(buf, 0)
		f.Close()
		if string(buf[:n]) == "secret" {
			t.Fatalf("read the outside secret through a raced symlink after %d tries", tries)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d walks+opens raced a symlink swap", tries)
}

func TestReadWriteDirOps(t *testing.T) {
	s, dir, _ := newShare(t)
	r := root(t, s)
	if _, err := r.Mkdir("sub", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	sub := mustWalk(t, r, "sub")
	f, _, _, err := sub.Create("file", p9.ReadWrite, 0o640, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("hello world"), 0); n != 11 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "file")); string(b) != "hello world" {
		t.Fatalf("host sees %q", b)
	}
	g := mustWalk(t, r, "sub", "file")
	if err := g.SetAttr(p9.SetAttrMask{Size: true, Permissions: true}, p9.SetAttr{Size: 5, Permissions: 0o600}); err != nil {
		t.Fatal(err)
	}
	_, _, attr, err := g.GetAttr(p9.AttrMaskAll)
	if err != nil || attr.Size != 5 || attr.Mode.Permissions() != 0o600 || !attr.Mode.IsRegular() {
		t.Fatalf("getattr: %+v, %v", attr, err)
	}
	if err := sub.RenameAt("file", r, "moved"); err != nil {
		t.Fatal(err)
	}
	if err := r.Link(mustWalk(t, r, "moved"), "hard"); err != nil {
		t.Fatal(err)
	}
	d := mustWalk(t, r)
	if _, _, err := d.Open(p9.ReadOnly); err != nil {
		t.Fatal(err)
	}
	// A small byte budget makes Readdir stop and resume by offset.
	seen := map[string]bool{}
	var off uint64
	for i := 0; i < 20; i++ {
		ents, err := d.Readdir(off, 40)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			seen[e.Name] = true
			off = e.Offset
		}
	}
	for _, want := range []string{".", "..", "sub", "moved", "hard"} {
		if !seen[want] {
			t.Errorf("readdir missed %q (saw %v)", want, seen)
		}
	}
	if err := r.UnlinkAt("hard", 0); err != nil {
		t.Fatal(err)
	}
	if err := r.UnlinkAt("sub", unix.AT_REMOVEDIR); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub still there: %v", err)
	}
	if st, err := r.StatFS(); err != nil || st.Blocks == 0 {
		t.Errorf("statfs: %+v, %v", st, err)
	}
}
