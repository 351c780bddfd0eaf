package virtiofs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// outside is a directory with a share in it and things next to the share
// that no guest may read, write, create in or chmod.
type outside struct {
	base, share, secret, outDir string
	secretStat                  unix.Stat_t
}

func newOutside(t *testing.T) *outside {
	o := &outside{base: t.TempDir()}
	o.share = filepath.Join(o.base, "share")
	o.secret = filepath.Join(o.base, "secret")
	o.outDir = filepath.Join(o.base, "outdir")
	os.Mkdir(o.share, 0o755)
	os.Mkdir(o.outDir, 0o755)
	if err := os.WriteFile(o.secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Lstat(o.secret, &o.secretStat)
	return o
}

// check fails if anything outside the share changed.
func (o *outside) check(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(o.secret); err != nil || string(b) != "secret" {
		t.Errorf("secret now %q, %v", b, err)
	}
	var st unix.Stat_t
	unix.Lstat(o.secret, &st)
	if st.Mode != o.secretStat.Mode || st.Nlink != 1 || st.Uid != o.secretStat.Uid {
		t.Errorf("secret's mode %o nlink %d uid %d: was %o 1 %d", st.Mode, st.Nlink, st.Uid, o.secretStat.Mode, o.secretStat.Uid)
	}
	if ents, _ := os.ReadDir(o.outDir); len(ents) != 0 {
		t.Errorf("made in the directory outside: %v", ents)
	}
	if ents, _ := os.ReadDir(o.base); len(ents) != 3 {
		t.Errorf("made next to the share: %v", ents)
	}
	if fi, _ := os.Stat(o.outDir); fi.Mode().Perm() != 0o755 {
		t.Errorf("outdir's mode is now %v", fi.Mode())
	}
}

func TestHostileSymlinks(t *testing.T) {
	o := newOutside(t)
	defer o.check(t)
	// Planted by the host, and made by the guest: both kinds.
	os.Symlink("../secret", filepath.Join(o.share, "host-ln"))
	os.Symlink(o.outDir, filepath.Join(o.share, "host-dir-ln"))
	g := newGuest(t, o.share, false)
	if e := g.symlink(rootID, "guest-ln", "/"); e != 0 {
		t.Fatal(e)
	}
	if e := g.symlink(rootID, "guest-secret", "../secret"); e != 0 {
		t.Fatal(e)
	}
	for _, name := range []string{"host-ln", "guest-secret"} {
		ln := g.mustLookup(rootID, name)
		if ln.mode&unix.S_IFMT != unix.S_IFLNK {
			t.Fatalf("%s: mode %o, want the symlink itself", name, ln.mode)
		}
		for _, flags := range []uint32{unix.O_RDONLY, unix.O_RDWR, unix.O_WRONLY | unix.O_TRUNC} {
			if _, e := g.open(ln.node, flags); e == 0 {
				t.Errorf("open %s flags %#x: opened", name, flags)
			}
		}
		if e := g.chmod(ln.node, 0o777); e == 0 {
			t.Errorf("chmod %s: done", name)
		}
		if e := g.truncate(ln.node, 0); e == 0 {
			t.Errorf("truncate %s: done", name)
		}
		// A hard link to the symlink is a link to the symlink, not to
		// what it names.
		if l, e := g.link(ln.node, rootID, name+"-hard"); e == 0 && l.mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("hard link to %s is mode %o", name, l.mode)
		}
	}
	for _, name := range []string{"host-dir-ln", "guest-ln"} {
		ln := g.mustLookup(rootID, name)
		if _, e := g.lookup(ln.node, "etc"); e == 0 {
			t.Errorf("lookup through %s: found", name)
		}
		if _, _, e := g.create(ln.node, "x", unix.O_RDWR, 0o644); e == 0 {
			t.Errorf("create through %s: created", name)
		}
		if _, e := g.mkdir(ln.node, "x", 0o755); e == 0 {
			t.Errorf("mkdir through %s: made", name)
		}
		if e := g.symlink(ln.node, "x", "y"); e == 0 {
			t.Errorf("symlink through %s: made", name)
		}
		if e := g.mknod(ln.node, "x", unix.S_IFIFO|0o644, 0); e == 0 {
			t.Errorf("mknod through %s: made", name)
		}
		if e := g.rename(rootID, "guest-secret", ln.node, "x"); e == 0 {
			t.Errorf("rename into %s: done", name)
		}
	}
}

func TestHostileNames(t *testing.T) {
	o := newOutside(t)
	defer o.check(t)
	os.WriteFile(filepath.Join(o.share, "f"), []byte("f"), 0o644)
	g := newGuest(t, o.share, false)
	for _, name := range []string{"..", ".", "../secret", "/etc", "a/../../secret", ""} {
		if _, e := g.lookup(rootID, name); e == 0 {
			t.Errorf("lookup %q: found", name)
		}
		if _, _, e := g.create(rootID, name, unix.O_RDWR, 0o644); e == 0 {
			t.Errorf("create %q: created", name)
		}
		if e := g.rename(rootID, "f", rootID, name); e == 0 {
			t.Errorf("rename f to %q: done", name)
		}
		if _, e := g.link(g.mustLookup(rootID, "f").node, rootID, name); e == 0 {
			t.Errorf("link f as %q: done", name)
		}
		if e := g.symlink(rootID, name, "x"); e == 0 {
			t.Errorf("symlink %q: made", name)
		}
	}
	// Node ids the guest was never given.
	for _, id := range []uint64{0, 999, 1 << 63} {
		if _, e := g.getattr(id); e == 0 {
			t.Errorf("getattr of node %d: answered", id)
		}
		if _, e := g.open(id, unix.O_RDONLY); e == 0 {
			t.Errorf("open of node %d: opened", id)
		}
	}
	// A file handle never given.
	if _, e := g.read(rootID, 12345, 0, 10); e == 0 {
		t.Error("read of an unknown handle: answered")
	}
}

// TestHostileSwap: a name looked up as a file, or a directory, and then
// swapped for a symlink out of the share (a rename on the host, between
// the guest's lookup and its use) is never followed.
func TestHostileSwap(t *testing.T) {
	o := newOutside(t)
	defer o.check(t)
	file := filepath.Join(o.share, "file")
	dir := filepath.Join(o.share, "dir")
	os.WriteFile(file, []byte("file"), 0o644)
	os.Mkdir(dir, 0o755)
	g := newGuest(t, o.share, false)
	f := g.mustLookup(rootID, "file")
	d := g.mustLookup(rootID, "dir")

	swap := func(path, target string) {
		tmp := path + ".swap"
		os.Symlink(target, tmp)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	os.Rename(file, file+".old")
	swap(file, o.secret)
	os.RemoveAll(dir)
	swap(dir, o.outDir)

	for _, flags := range []uint32{unix.O_RDONLY, unix.O_RDWR} {
		if _, e := g.open(f.node, flags); e == 0 {
			t.Errorf("open of the swapped file (flags %#x): opened", flags)
		}
	}
	if e := g.chmod(f.node, 0o777); e == 0 {
		t.Error("chmod of the swapped file: done")
	}
	if e := g.truncate(f.node, 0); e == 0 {
		t.Error("truncate of the swapped file: done")
	}
	if _, e := g.getattr(f.node); e == 0 {
		t.Error("getattr of the swapped file: answered")
	}
	if _, _, e := g.create(d.node, "x", unix.O_RDWR, 0o644); e == 0 {
		t.Error("create in the swapped directory: created")
	}
	if _, e := g.mkdir(d.node, "x", 0o755); e == 0 {
		t.Error("mkdir in the swapped directory: made")
	}
	if e := g.chmod(d.node, 0o777); e == 0 {
		t.Error("chmod of the swapped directory: done")
	}
	if e, _ := g.do(opOpendir, d.node, 4096, uint32(0), uint32(0)); e == 0 {
		t.Error("opendir of the swapped directory: opened")
	}
	if _, e := g.link(f.node, rootID, "hard"); e == 0 {
		t.Error("hard link of the swapped file: made")
	}

	// An open file stays the file it was, whatever its name becomes.
	os.Remove(file)
	os.Rename(file+".old", file)
	f2 := g.mustLookup(rootID, "file")
	fh, e := g.open(f2.node, unix.O_RDWR)
	if e != 0 {
		t.Fatal(e)
	}
	os.Rename(file, file+".moved")
	swap(file, o.secret)
	if n, e := g.write(f2.node, fh, 0, []byte("FILE")); e != 0 || n != 4 {
		t.Fatalf("write to the open file: %d %v", n, e)
	}
	if b, _ := os.ReadFile(file + ".moved"); string(b) != "FILE" {
		t.Errorf("the open file holds %q", b)
	}
}

func TestHostileNodesAndModes(t *testing.T) {
	o := newOutside(t)
	defer o.check(t)
	g := newGuest(t, o.share, false)
	// No device nodes, made by the guest.
	for _, mode := range []uint32{unix.S_IFCHR | 0o666, unix.S_IFBLK | 0o666} {
		if e := g.mknod(rootID, "dev", mode, uint32(unix.Mkdev(1, 3))); e == 0 {
			t.Errorf("mknod %o: made", mode)
		}
	}
	// Nor opened when the host has one in the share.
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(o.share, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		n := g.mustLookup(rootID, "null")
		if _, e := g.open(n.node, unix.O_RDWR); e == 0 {
			t.Error("the host's device node was opened")
		}
		if _, e := g.open(n.node, unix.O_RDONLY); e == 0 {
			t.Error("the host's device node was opened")
		}
	}
	// FIFOs and sockets are fine.
	if e := g.mknod(rootID, "fifo", unix.S_IFIFO|0o644, 0); e != 0 {
		t.Errorf("mknod fifo: %v", e)
	}
	// No setuid, and setgid only on directories.
	f, _, e := g.create(rootID, "suid", unix.O_RDWR, 0o4755)
	if e != 0 {
		t.Fatal(e)
	}
	if e := g.chmod(f.node, 0o6755); e != 0 {
		t.Fatal(e)
	}
	if _, e := g.mkdir(rootID, "sgid-dir", 0o6755); e != 0 {
		t.Fatal(e)
	}
	if e := g.mknod(rootID, "suid-fifo", unix.S_IFIFO|0o4644, 0); e != 0 {
		t.Fatal(e)
	}
	for name, want := range map[string]uint32{"suid": 0o755, "sgid-dir": 0o2755, "suid-fifo": 0o644} {
		var st unix.Stat_t
		unix.Lstat(filepath.Join(o.share, name), &st)
		if st.Mode&0o7777 != want {
			t.Errorf("%s: mode %o, want %o", name, st.Mode&0o7777, want)
		}
	}
	// Hard links and renames stay inside.
	if _, e := g.link(f.node, rootID, "hard"); e != 0 {
		t.Errorf("hard link inside: %v", e)
	}
	if e := g.rename(rootID, "hard", rootID, "renamed"); e != 0 {
		t.Errorf("rename inside: %v", e)
	}
	if e, _ := g.do(opRename, rootID, 4096, uint64(rootID), "renamed", "../escaped"); e == 0 {
		t.Error("RENAME to ../escaped: done")
	}
	// Rename flags the device does not take (RENAME_WHITEOUT).
	if e, _ := g.do(opRename2, rootID, 4096, uint64(rootID), uint32(unix.RENAME_WHITEOUT), uint32(0), "renamed", "w"); e == 0 {
		t.Error("RENAME_WHITEOUT: done")
	}
}

// TestHiddenMounts shares the host's root read-only, as --root does: its
// /proc and /sys are empty directories, there to be mounted over.
func TestHiddenMounts(t *testing.T) {
	var st unix.Statfs_t
	if unix.Statfs("/proc/self", &st) != nil || st.Type != unix.PROC_SUPER_MAGIC {
		t.Skip("no proc on /proc")
	}
	g := newGuest(t, "/", true)
	for _, dir := range []string{"proc", "sys"} {
		d, e := g.lookup(rootID, dir)
		if e != 0 {
			t.Fatalf("lookup /%s: %v", dir, e)
		}
		if d.mode&unix.S_IFMT != unix.S_IFDIR {
			t.Fatalf("/%s: mode %o", dir, d.mode)
		}
		for _, name := range []string{"self", "1", "kernel", "class"} {
			if _, e := g.lookup(d.node, name); e != unix.ENOENT {
				t.Errorf("lookup /%s/%s: %v, want ENOENT", dir, name, e)
			}
		}
		if names := g.readdir(d.node, true); len(names) != 0 {
			t.Errorf("/%s lists %d entries", dir, len(names))
		}
	}
	if _, e := g.lookup(rootID, "etc"); e != 0 {
		t.Fatalf("lookup /etc: %v", e)
	}
}
