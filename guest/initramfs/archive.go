package main

import (
	"fmt"
	"io"
	"path"
	"sort"

	"github.com/u-root/u-root/pkg/cpio"
)

// spec is what goes into one initramfs.
type spec struct {
	// init is the content of /init.
	init []byte
	// busybox is the content of /bin/busybox; nil leaves busybox out.
	busybox []byte
	// applets are busybox's applet paths relative to / (bin/sh, sbin/ip...);
	// each becomes a symlink to /bin/busybox.
	applets []string
}

// Directories every guest has, with their modes.
var baseDirs = []struct {
	name string
	mode uint64
}{
	{"bin", 0o755}, {"dev", 0o755}, {"etc", 0o755}, {"proc", 0o555},
	{"root", 0o700}, {"sbin", 0o755}, {"sys", 0o555}, {"tmp", 0o1777},
	{"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
}

// Minimal /etc for a root-only system.
var etcFiles = []struct{ name, content string }{
	{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"},
	{"etc/group", "root:x:0:\n"},
	{"etc/hosts", "127.0.0.1\tlocalhost\n"},
}

// records lists the archive's records, parents before children, with
// reproducible metadata (mtime 0, root-owned, inodes numbered in order).
func records(s spec) ([]cpio.Record, error) {
	if len(s.init) == 0 {
		return nil, fmt.Errorf("/init is empty")
	}
	var recs []cpio.Record
	for _, d := range baseDirs {
		recs = append(recs, cpio.Directory(d.name, d.mode))
	}
	// The kernel opens /dev/console for init before anything mounts devtmpfs.
	recs = append(recs,
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.CharDev("dev/null", 0o666, 1, 3),
	)
	for _, f := range etcFiles {
		recs = append(recs, cpio.StaticFile(f.name, f.content, 0o644))
	}
	recs = append(recs, cpio.StaticRecord(s.init, cpio.Info{Name: "init", Mode: cpio.S_IFREG | 0o755}))

	if s.busybox != nil {
		recs = append(recs, cpio.StaticRecord(s.busybox, cpio.Info{Name: "bin/busybox", Mode: cpio.S_IFREG | 0o755}))
		links, err := appletLinks(s.applets)
		if err != nil {
			return nil, err
		}
		recs = append(recs, links...)
	}

	for i := range recs {
		recs[i] = cpio.MakeReproducible(recs[i])
		recs[i].Ino = uint64(i + 1)
		recs[i].NLink = 1
	}
	return recs, nil
}

// appletLinks makes a symlink to /bin/busybox for each applet that lives in
// one of the base directories and does not collide with a real file.
func appletLinks(applets []string) ([]cpio.Record, error) {
	dirs := map[string]bool{}
	for _, d := range baseDirs {
		dirs[d.name] = true
	}
	reserved := map[string]bool{"init": true, "bin/busybox": true}
	seen := map[string]bool{}
	var names []string
	for _, a := range applets {
		name := cpio.Normalize(a)
		if name == "." || reserved[name] || seen[name] {
			continue
		}
		if !dirs[path.Dir(name)] {
			continue // e.g. /linuxrc: not a command anyone runs here
		}
		seen[name] = true
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("busybox lists no applets")
	}
	sort.Strings(names)
	links := make([]cpio.Record, 0, len(names))
	for _, name := range names {
		links = append(links, cpio.Symlink(name, "/bin/busybox"))
	}
	return links, nil
}

// writeArchive writes recs as an uncompressed newc cpio with its trailer.
func writeArchive(w io.Writer, recs []cpio.Record) error {
	rw := cpio.Newc.Writer(w)
	if err := cpio.WriteRecords(rw, recs); err != nil {
		return err
	}
	return cpio.WriteTrailer(rw)
}
