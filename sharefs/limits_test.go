package sharefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

func openWith(t *testing.T, lim Limits) (*Share, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := OpenWith(dir, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// TestOpenFilesLimit: Open and Create past the limit get ENFILE and hold
// no fd; Close gives the slot back.
func TestOpenFilesLimit(t *testing.T) {
	s, dir := openWith(t, Limits{NodeMemory: 1 << 20, OpenFiles: 3})
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	r := root(t, s)
	var open []*File
	for range 3 {
		f := mustWalk(t, r, "f")
		if _, _, err := f.Open(p9.ReadOnly); err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	f := mustWalk(t, r, "f")
	if _, _, err := f.Open(p9.ReadOnly); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("open past the limit: %v, want ENFILE", err)
	}
	if _, _, _, err := r.Create("new", p9.ReadWrite, 0o644, 0, 0); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("create past the limit: %v, want ENFILE", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatalf("a refused create made the file: %v", err)
	}
	if n := s.OpenFiles(); n != 3 {
		t.Fatalf("%d open files counted, want 3", n)
	}
	open[0].Close()
	open[0].Close() // the server closes once; twice must not count twice
	if n := s.OpenFiles(); n != 2 {
		t.Fatalf("%d open files counted after a close, want 2", n)
	}
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		t.Fatalf("open after a close: %v", err)
	}
	// A failed open gives its slot back.
	open[1].Close()
	g := mustWalk(t, r, "f")
	os.Remove(filepath.Join(dir, "f"))
	if _, _, err := g.Open(p9.ReadOnly); err == nil {
		t.Fatal("open of a removed file succeeded")
	}
	if n := s.OpenFiles(); n != 2 {
		t.Fatalf("%d open files counted after a failed open, want 2", n)
	}
}

// TestNodesLimit: Attach and Walk past the limit get ENFILE; Close gives
// the node back.
func TestNodesLimit(t *testing.T) {
	s, _ := openWith(t, Limits{NodeMemory: 3 * (NodeCost + len(".")), OpenFiles: 3})
	r := root(t, s)
	a := mustWalk(t, r)
	mustWalk(t, r)
	if _, err := walk(t, r); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("walk past the limit: %v, want ENFILE", err)
	}
	if _, err := s.Attach(); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("attach past the limit: %v, want ENFILE", err)
	}
	a.Close()
	if n := s.Nodes(); n != 2 {
		t.Fatalf("%d nodes counted after a close, want 2", n)
	}
	mustWalk(t, r)
}

// TestLongPathsChargedMore: a File's path is part of what it costs, so a
// guest cannot multiply the limit's memory by walking fids deep.
func TestLongPathsChargedMore(t *testing.T) {
	long := strings.Repeat("l", 200)
	s, dir := openWith(t, Limits{NodeMemory: 2*NodeCost + len(".") + len("s") + len(long)/2, OpenFiles: 3})
	os.Mkdir(filepath.Join(dir, "s"), 0o755)
	os.Mkdir(filepath.Join(dir, long), 0o755)
	r := root(t, s)
	if _, err := walk(t, r, long); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("walk to a long name: %v, want ENFILE", err)
	}
	mustWalk(t, r, "s")
	if n := s.Nodes(); n != 2 {
		t.Fatalf("%d nodes, want 2", n)
	}
}

// TestLimitsKeepFDsForTheVMM: however high the limit asked, a share holds
// at most a quarter of the process's fds.
func TestLimitsKeepFDsForTheVMM(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	s, _ := openWith(t, Limits{NodeMemory: NodeCost, OpenFiles: 1 << 30})
	if got := uint64(s.Limits().OpenFiles); got > rl.Cur/4 {
		t.Fatalf("open files limit %d with an fd limit of %d", got, rl.Cur)
	}
	if _, err := OpenWith(t.TempDir(), Limits{}); err == nil {
		t.Fatal("zero limits accepted")
	}
}

// TestChownKeepsOwner: whoever runs the VMM (root too), the guest cannot
// give a file, or the share's root, to another user or to a group the
// VMM's user is not in; setting what is already there is no change and
// allowed.
func TestChownKeepsOwner(t *testing.T) {
	s, dir, _ := newShare(t)
	r := root(t, s)
	f, _, _, err := r.Create("file", p9.ReadWrite, 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	const other = 54321 // no user or group of this process
	uid, gid := uint32(os.Geteuid()), uint32(os.Getegid())
	for _, name := range []string{"file", "."} {
		n := r
		if name != "." {
			n = mustWalk(t, r, name)
		}
		for _, c := range []struct {
			valid p9.SetAttrMask
			attr  p9.SetAttr
		}{
			{p9.SetAttrMask{UID: true}, p9.SetAttr{UID: other}},
			{p9.SetAttrMask{GID: true}, p9.SetAttr{GID: other}},
			{p9.SetAttrMask{UID: true, GID: true}, p9.SetAttr{UID: other, GID: p9.GID(gid)}},
		} {
			if err := n.SetAttr(c.valid, c.attr); !errors.Is(err, unix.EPERM) {
				t.Errorf("%s: chown %+v: %v, want EPERM", name, c.attr, err)
			}
		}
		if err := n.SetAttr(p9.SetAttrMask{UID: true, GID: true}, p9.SetAttr{UID: p9.UID(uid), GID: p9.GID(gid)}); err != nil {
			t.Errorf("%s: chown to its own owner: %v", name, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
	}
	// Nor does a mode make the file run as its owner.
	n := mustWalk(t, r, "file")
	if err := n.SetAttr(p9.SetAttrMask{Permissions: true}, p9.SetAttr{Permissions: 0o6755}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "file")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Fatalf("mode %v, %v: want no setuid or setgid", st.Mode(), err)
	}
}
