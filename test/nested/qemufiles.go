package nested

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// QEMUData are the firmware files that the bench's QEMU command line
// (bench/e2e/guest.go: -M q35, -kernel with a PVH ELF, virtio-net-pci) opens, as
// strace showed: SeaBIOS, the PVH boot option ROM, the vAPIC option ROM and
// virtio-net's option ROM; qboot, the firmware of bench boot's -M microvm;
// and the option ROM that boots a bzImage (bench usernet's -kernel), without
// which QEMU only warns and SeaBIOS finds nothing to boot: the guest waits
// there until the benchmark's timeout. Nothing else of QEMU's data goes
// into L1.
var QEMUData = []string{"bios-256k.bin", "pvh.bin", "kvmvapic.bin", "efi-virtio.rom", "bios-microvm.bin", "linuxboot_dma.bin"}

// qemuDataDirs are where Debian's QEMU looks for firmware, relative to its
// binary's directory (its --firmwarepath), in its order; the files are
// often symbolic links into the seabios and ipxe-qemu packages.
var qemuDataDirs = []string{"../share/qemu", "../share/seabios", "../lib/ipxe/qemu"}

// QEMUFiles are the initramfs files that let L1 run the host's QEMU binary
// bin (a path or a name in $PATH): the binary at its own path, every shared
// library it needs and the dynamic loader at theirs, data (QEMUData) where
// the binary will look for it, and /bin/NAME pointing to it (L1's $PATH).
// Symbolic links are followed: L1 gets the contents.
func QEMUFiles(bin string, data []string) ([]File, error) {
	found, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("QEMU for L1: %v", err)
	}
	// QEMU finds its data next to /proc/self/exe, the real path.
	real, err := filepath.EvalSymlinks(found)
	if err != nil {
		return nil, fmt.Errorf("QEMU for L1: %v", err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, err
	}
	libs, err := SharedLibraries(real)
	if err != nil {
		return nil, fmt.Errorf("QEMU for L1: %v", err)
	}
	files := []File{{Dest: real, Src: real, Mode: 0o755}}
	if link := "/bin/" + filepath.Base(found); link != real {
		files = append(files, File{Dest: link, Link: real})
	}
	for _, lib := range libs {
		files = append(files, File{Dest: lib, Src: lib, Mode: 0o755})
	}
	dataFiles, err := qemuDataFiles(real, data)
	if err != nil {
		return nil, err
	}
	return append(files, dataFiles...), nil
}

// qemuDataFiles finds each of names in qemuDataDirs next to the binary bin,
// first match wins, as QEMU searches.
func qemuDataFiles(bin string, names []string) ([]File, error) {
	var files []File
	for _, name := range names {
		var where string
		for _, d := range qemuDataDirs {
			p := path.Join(path.Dir(bin), d, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				where = p
				break
			}
		}
		if where == "" {
			return nil, fmt.Errorf("QEMU for L1: no %s in %s/{%s} (Debian: apt-get install qemu-system-data seabios ipxe-qemu)",
				name, path.Dir(bin), strings.Join(qemuDataDirs, ","))
		}
		files = append(files, File{Dest: where, Src: where, Mode: 0o644})
	}
	return files, nil
}
