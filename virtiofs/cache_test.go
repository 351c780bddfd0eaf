package virtiofs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
)

func newCacheGuest(t *testing.T, dir string, c Cache) *guest {
	t.Helper()
	share, err := sharefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { share.Close() })
	dev, err := New(Config{Tag: "share0", Share: share, Cache: c, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return startGuest(t, dev)
}

// entryTimeouts are the entry and attribute validity of an entry_out.
func entryTimeouts(b []byte) (entry, attr time.Duration) {
	// nodeid, generation, entry_valid, attr_valid, entry_valid_nsec, attr_valid_nsec
	sec := func(off, nsec int) time.Duration {
		return time.Duration(binary.LittleEndian.Uint64(b[off:]))*time.Second +
			time.Duration(binary.LittleEndian.Uint32(b[nsec:]))
	}
	return sec(16, 32), sec(24, 36)
}

// TestCachePolicy: what each policy lets the guest keep, as the guest's
// kernel reads it from the replies. A walk costs the guest a request per
// directory, not per file, only while READDIRPLUS is negotiated and its
// entries carry node IDs and timeouts; a sequential read goes through the
// guest's readahead only without FOPEN_DIRECT_IO; a second walk or read
// costs nothing under CacheAlways only with its timeouts, KEEP_CACHE and
// CACHE_DIR. Each is a regression that multiplies the requests of the
// share benchmark.
func TestCachePolicy(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 50; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%02d", i)), []byte("x"), 0o644)
	}
	for _, tc := range []struct {
		cache     Cache
		timeout   time.Duration
		fileFlags uint32
		opendir   unix.Errno // ENOSYS: Linux opens directories itself, with KEEP_CACHE|CACHE_DIR
	}{
		{CacheAuto, time.Second, 0, 0},
		{CacheAlways, time.Minute, fuse.FOPEN_KEEP_CACHE, unix.ENOSYS},
	} {
		t.Run(tc.cache.String(), func(t *testing.T) {
			g := newCacheGuest(t, dir, tc.cache) // and its INIT
			// INIT again, as Linux 6.1 sends it; the reply's flags and max_pages.
			e, b := g.do(opInit, 0, 4096, uint32(7), uint32(38), uint32(128<<10),
				uint32(fuse.CAP_READDIRPLUS|fuse.CAP_MAX_PAGES|fuse.CAP_ASYNC_READ|fuse.CAP_AUTO_INVAL_DATA|fuse.CAP_PARALLEL_DIROPS),
				uint32(0), [11]uint32{})
			if e != 0 {
				t.Fatalf("INIT: %v", e)
			}
			flags := binary.LittleEndian.Uint32(b[12:])
			for _, want := range []uint32{fuse.CAP_READDIRPLUS, fuse.CAP_MAX_PAGES, fuse.CAP_ASYNC_READ, fuse.CAP_AUTO_INVAL_DATA} {
				if flags&want == 0 {
					t.Errorf("INIT reply flags %#x lack %#x", flags, want)
				}
			}
			if maxPages := binary.LittleEndian.Uint16(b[28:]); int(maxPages)*4096 < MaxWrite || binary.LittleEndian.Uint32(b[20:]) != MaxWrite {
				t.Errorf("max_pages %d: READs smaller than MaxWrite", maxPages)
			}

			en, b := g.do(opLookup, rootID, 4096, "file00")
			if en != 0 {
				t.Fatal(en)
			}
			if et, at := entryTimeouts(b); et != tc.timeout || at != tc.timeout {
				t.Errorf("LOOKUP timeouts %v, %v; want %v", et, at, tc.timeout)
			}
			node := binary.LittleEndian.Uint64(b)
			en, b = g.do(opOpen, node, 4096, uint32(unix.O_RDONLY), uint32(0))
			if en != 0 {
				t.Fatal(en)
			}
			if got := binary.LittleEndian.Uint32(b[8:]); got != tc.fileFlags {
				t.Errorf("OPEN flags %#x, want %#x", got, tc.fileFlags)
			}
			en, b = g.do(opOpendir, rootID, 4096, uint32(unix.O_RDONLY), uint32(0))
			if en != tc.opendir {
				t.Fatalf("OPENDIR: %v, want %v", en, tc.opendir)
			}
			var fh uint64 // none after ENOSYS
			if en == 0 {
				if got := binary.LittleEndian.Uint32(b[8:]); got != 0 {
					t.Errorf("OPENDIR flags %#x, want none: the listing is read again at each open", got)
				}
				fh = binary.LittleEndian.Uint64(b)
				// No handle: not a directory this guest opened.
				if en, _ := g.do(opReaddirplus, rootID, 4096+outHeaderLen, readIn(0, 0, 4096)...); en != unix.EBADF {
					t.Errorf("READDIRPLUS with no handle: %v, want EBADF", en)
				}
			}
			// One page, as Linux 6.1 asks: every entry but . and ..
			// comes with its node and its timeouts.
			en, b = g.do(opReaddirplus, rootID, 4096+outHeaderLen, readIn(fh, 0, 4096)...)
			if en != 0 {
				t.Fatal(en)
			}
			n := 0
			for len(b) > 0 {
				nl := int(binary.LittleEndian.Uint32(b[128+16:]))
				name := string(b[128+24 : 128+24+nl])
				if name != "." && name != ".." {
					if binary.LittleEndian.Uint64(b) == 0 {
						t.Errorf("READDIRPLUS %s: no node", name)
					}
					if et, at := entryTimeouts(b); et != tc.timeout || at != tc.timeout {
						t.Errorf("READDIRPLUS %s timeouts %v, %v", name, et, at)
					}
					n++
				}
				b = b[(128+24+nl+7)&^7:]
			}
			if n < 20 {
				t.Errorf("%d entries in one page of READDIRPLUS", n)
			}
			st := g.dev.Stats()
			if st.Ops["INIT"] != 2 || st.Ops["LOOKUP"] != 1 || st.Ops["READDIRPLUS"] == 0 || st.Ops["OPENDIR"] != 1 {
				t.Errorf("op counts %v", st.Ops)
			}
		})
	}
}

// TestNoHandleReaddirSwapped: under CacheAlways a READDIR comes with no
// handle and the device opens the directory itself, by the node's name;
// a directory swapped for a symlink to the outside since the lookup is
// refused (ENOTDIR), one swapped for another directory too (ESTALE).
func TestNoHandleReaddirSwapped(t *testing.T) {
	o := newOutside(t)
	os.WriteFile(filepath.Join(o.outDir, "..secretlisting"), nil, 0o644)
	defer os.Remove(filepath.Join(o.outDir, "..secretlisting"))
	d := filepath.Join(o.share, "d")
	os.Mkdir(d, 0o755)
	os.WriteFile(filepath.Join(d, "inside"), nil, 0o644)
	g := newCacheGuest(t, o.share, CacheAlways)
	node := g.mustLookup(rootID, "d").node
	if names := g.readdirNoHandle(node); len(names) != 3 {
		t.Fatalf("listing %q", names)
	}
	os.Rename(d, d+".old")
	os.Symlink(o.outDir, d)
	if e, b := g.do(opReaddirplus, node, 4096+outHeaderLen, readIn(0, 0, 4096)...); e == 0 {
		t.Errorf("READDIRPLUS of a directory swapped for a symlink listed %q", b)
	}
	os.Remove(d)
	os.Mkdir(d, 0o755)
	if e, _ := g.do(opReaddir, node, 4096+outHeaderLen, readIn(0, 0, 4096)...); e != unix.ESTALE {
		t.Errorf("READDIR of a directory swapped for another: %v, want ESTALE", e)
	}
	if e, _ := g.do(opFsyncdir, node, 4096, uint64(0), uint32(0), uint32(0)); e != unix.ESTALE {
		t.Errorf("FSYNCDIR of a swapped directory: %v, want ESTALE", e)
	}
	if e, _ := g.do(opFsyncdir, rootID, 4096, uint64(0), uint32(0), uint32(0)); e != 0 {
		t.Errorf("FSYNCDIR of the root with no handle: %v", e)
	}
	os.Remove(filepath.Join(o.outDir, "..secretlisting"))
	o.check(t)
}

// readdirNoHandle lists a directory with READDIR and no handle, as Linux
// does after OPENDIR's ENOSYS.
func (g *guest) readdirNoHandle(node uint64) []string {
	g.t.Helper()
	var names []string
	off := uint64(0)
	for {
		e, b := g.do(opReaddir, node, 1024+outHeaderLen, readIn(0, off, 1024)...)
		if e != 0 {
			g.t.Fatalf("readdir: %v", e)
		}
		if len(b) == 0 {
			return names
		}
		for len(b) > 0 {
			off = binary.LittleEndian.Uint64(b[8:])
			nl := int(binary.LittleEndian.Uint32(b[16:]))
			names = append(names, string(b[24:24+nl]))
			b = b[(24+nl+7)&^7:]
		}
	}
}
