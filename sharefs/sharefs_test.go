package sharefs

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// readFD reads what fd holds (and closes it).
func readFD(fd int) string {
	defer unix.Close(fd)
	buf := make([]byte, 64)
	n, _ := unix.Pread(fd, buf, 0)
	return string(buf[:max(n, 0)])
}

func TestSymlinksNeverFollowed(t *testing.T) {
	s, dir, outside := newShare(t)
	for name, target := range map[string]string{"abs": outside, "rel": "../outside", "root": "/", "file": filepath.Join(outside, "secret")} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"abs/secret", "rel/secret", "root/etc", "../outside/secret", "/etc/passwd", filepath.Join(outside, "secret")} {
		if fd, err := s.OpenBeneath(rel, unix.O_RDONLY); err == nil {
			t.Errorf("open %s: read %q", rel, readFD(fd))
		} else if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("open %s: %v, want ELOOP, EXDEV or ENOTDIR", rel, err)
		}
	}
	for _, name := range []string{"abs", "file", "root"} {
		// The link itself, with O_PATH only.
		fd, err := s.OpenBeneath(name, unix.O_PATH)
		if err != nil {
			t.Fatalf("O_PATH %s: %v", name, err)
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st); st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("O_PATH %s: mode %o, not the symlink", name, st.Mode)
		}
		unix.Close(fd)
		if fd, err := s.OpenBeneath(name, unix.O_RDONLY); err == nil {
			t.Errorf("open %s through the symlink: read %q", name, readFD(fd))
		}
		if fd, err := s.OpenBeneath(name, unix.O_WRONLY|unix.O_TRUNC); err == nil {
			unix.Close(fd)
			t.Errorf("truncate through symlink %s succeeded", name)
		}
	}
	dfd, err := s.OpenBeneath(".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if fd, err := OpenAt(dfd, "file", unix.O_RDONLY, 0); err == nil {
		t.Errorf("OpenAt through a symlink: read %q", readFD(fd))
	}
	// O_CREAT on a dangling or outward symlink must not create its target.
	os.Symlink(filepath.Join(outside, "new"), filepath.Join(dir, "dangling"))
	if fd, err := OpenAt(dfd, "dangling", unix.O_RDWR|unix.O_CREAT, 0o644); err == nil {
		unix.Close(fd)
		t.Error("O_CREAT through a dangling symlink succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
		t.Errorf("outside/new made: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Errorf("outside secret changed: %q", b)
	}
}

func TestNamesRefused(t *testing.T) {
	s, _, _ := newShare(t)
	dfd, err := s.OpenBeneath(".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for _, name := range []string{"..", "", "a/b", "/etc", "x\x00y"} {
		if CheckName(name) == nil {
			t.Errorf("CheckName(%q) passed", name)
		}
		if fd, err := OpenAt(dfd, name, unix.O_PATH, 0); err == nil {
			unix.Close(fd)
			t.Errorf("OpenAt %q succeeded", name)
		}
	}
	if CheckName(".") == nil || CheckName("ok") != nil {
		t.Error("CheckName of . or ok")
	}
	// "." in OpenAt is the directory itself: how a directory fd is
	// reopened for reading.
	fd, err := OpenAt(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
}

// TestReopenIsTheSameInode: Reopen opens the inode the O_PATH fd names,
// even after its name was taken by a symlink to the outside.
func TestReopenIsTheSameInode(t *testing.T) {
	s, dir, outside := newShare(t)
	os.WriteFile(filepath.Join(dir, "f"), []byte("inside"), 0o644)
	pfd, err := s.OpenBeneath("f", unix.O_PATH)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "f"))
	fd, err := Reopen(pfd, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFD(fd); got != "inside" {
		t.Fatalf("reopened %q", got)
	}
}

// TestSymlinkRace swaps a directory for a symlink to the outside while
// opens go on; none may ever see the outside secret.
func TestSymlinkRace(t *testing.T) {
	s, dir, outside := newShare(t)
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
		fd, err := s.OpenBeneath("d/secret", unix.O_RDONLY)
		if err != nil {
			continue
		}
		if got := readFD(fd); got == "secret" {
			t.Fatalf("read the outside secret through a raced symlink after %d tries", tries)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d opens raced a symlink swap", tries)
}

func TestClosedShare(t *testing.T) {
	s, _, _ := newShare(t)
	var st unix.Statfs_t
	if err := s.Statfs(&st); err != nil || st.Blocks == 0 {
		t.Fatalf("statfs: %+v, %v", st, err)
	}
	s.Close()
	if _, err := s.OpenBeneath(".", unix.O_PATH); !errors.Is(err, unix.EBADF) {
		t.Fatalf("open after Close: %v, want EBADF", err)
	}
}
