package share

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"tinyvmm/vmm"
)

// qemuBinary is the anchor's VMM.
const qemuBinary = "qemu-system-x86_64"

// qemuGuest is the default guest QEMU boots: the same kernel and init as
// tinyvmm's, the kernel as tinyvmm boots it (the vmlinux, through its PVH
// entry, as bench boot's QEMU columns boot it in the nested L1).
var qemuGuest = [2]string{"out/guest/vmlinux", "out/guest/initramfs.cpio"}

// qemuCommand is QEMU with KVM booting the default guest on q35 with work
// as a virtio-9p share (QEMU's own server, -virtfs), the guest mounting it
// the way tinyvmm's 9p share was mounted before virtio-fs (msize 512000,
// cache=mmap) and measuring there. The kernel logs its boot to the
// console (no quiet), so an anchor killed at its bound shows how far it
// got. nil and why when it cannot run.
//
// The anchor's guest has one vCPU: this kernel has no ACPI and finds its
// CPUs in the MP table, where QEMU's firmware lists only the boot CPU
// whatever -smp says (so its 4 readers share one vCPU, and the report
// says so). -smp 1 also spares the firmware starting APs the guest never
// uses.
func qemuCommand(mode, work string, mem string, runs int, measure string) (*exec.Cmd, string) {
	if mode == "off" {
		return nil, "--qemu off"
	}
	bin, err := exec.LookPath(qemuBinary)
	if err == nil {
		err = unix.Access("/dev/kvm", unix.R_OK|unix.W_OK)
	}
	var files [2]string
	for i, f := range qemuGuest {
		if err == nil {
			files[i], err = filepath.Abs(f)
		}
		if err == nil {
			_, err = os.Stat(files[i])
		}
	}
	if err != nil {
		if mode == "on" {
			return nil, err.Error()
		}
		return nil, fmt.Sprintf("no %s with /dev/kvm and the default guest: %v", qemuBinary, err)
	}
	script := "mkdir -p /mnt && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap q9p /mnt && cd /mnt && " +
		fmt.Sprintf("%s --runs %d", measure, runs)
	cmdline := "console=ttyS0 reboot=k panic=-1 " + vmm.CommandArg([]string{"sh", "-c", script})
	cmd := exec.Command(bin, "-M", "q35", "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", mem,
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", files[0], "-initrd", files[1], "-append", cmdline,
		"-virtfs", "local,path="+work+",mount_tag=q9p,security_model=none,id=q9p",
		// init writes the command's status to port 0x501, tinyvmm's exit
		// device; QEMU then exits with status*2+1.
		"-device", "isa-debug-exit,iobase=0x501,iosize=1")
	cmd.Dir = work
	return cmd, ""
}
