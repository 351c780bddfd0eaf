package main

import (
	"os"
	"path/filepath"
)

// The default guest, built by `make guest`.
const (
	guestSubdir       = "out/guest"
	defaultKernel     = "vmlinux"
	defaultInitrd     = "initramfs.cpio"
	defaultPVMInitrd  = "initramfs-pause.cpio" // kernel-only: PVM guests cannot make system calls
	defaultBenchGuest = "bench.elf"            // the user-mode bench guest (--bench-guest)
)

// guestDirs lists where the default guest may be, best first:
// $TINYVMM_GUEST_DIR, out/guest in the repository the binary was built
// in (bin/tinyvmm sits one level down), and out/guest under the current
// directory.
func guestDirs() []string {
	var dirs []string
	if d := os.Getenv("TINYVMM_GUEST_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			dir := filepath.Dir(exe)
			for i := 0; i < 3; i++ {
				dirs = append(dirs, filepath.Join(dir, guestSubdir))
				dir = filepath.Dir(dir)
			}
		}
	}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, filepath.Join(wd, guestSubdir))
	}
	return dirs
}

// findGuestFile returns the first existing dir/name, or "".
func findGuestFile(dirs []string, name string) string {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}
