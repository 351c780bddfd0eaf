// Package nested runs tinyvmm's KVM tests on a host without /dev/kvm: it boots
// an L1 Linux with KVM_AMD under QEMU's TCG emulator (which emulates AMD SVM
// with nested paging), with an initramfs that holds the test binaries, and
// collects their exit status from the console.
package nested

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// File is one file of the L1 initramfs.
type File struct {
	// Dest is the absolute path inside L1.
	Dest string
	// Src is a host file to copy; Data is used when Src is empty.
	Src  string
	Data []byte
	// Mode holds the permission bits (0755 for programs).
	Mode uint64
	// Link, when set, makes Dest a symbolic link to Link instead.
	Link string
}

// WriteInitramfs writes an uncompressed newc cpio (the guest kernel has no
// decompressors) with files, their parent directories, a /dev/console for
// the early console, and /plan with one step per line for l1init.
func WriteInitramfs(w io.Writer, files []File, plan []string) error {
	records := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		cpio.StaticFile("plan", strings.Join(plan, "\n")+"\n", 0o644),
	}
	dirs := map[string]bool{"dev": true}
	sort.Slice(files, func(i, j int) bool { return files[i].Dest < files[j].Dest })
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.Dest), "/")
		if name == "" || name == "." || !path.IsAbs(f.Dest) {
			return fmt.Errorf("initramfs file %q: destination must be an absolute file path", f.Dest)
		}
		for _, d := range parents(name) {
			if !dirs[d] {
				dirs[d] = true
				records = append(records, cpio.Directory(d, 0o755))
			}
		}
		if f.Link != "" {
			records = append(records, cpio.Symlink(name, f.Link))
			continue
		}
		data := f.Data
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return fmt.Errorf("initramfs: %v", err)
			}
		}
		records = append(records, cpio.StaticRecord(data, cpio.Info{Name: name, Mode: cpio.S_IFREG | f.Mode}))
	}
	rw := cpio.Newc.Writer(w)
	if err := cpio.WriteRecords(rw, records); err != nil {
		return fmt.Errorf("initramfs: %v", err)
	}
	return cpio.WriteTrailer(rw)
}

// parents lists the directories above name, outermost first: a/b/c -> a, a/b.
func parents(name string) []string {
	var out []string
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}
