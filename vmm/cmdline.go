package vmm

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"tinyvmm/kvm"
)

// baseCmdline is what every tinyvmm guest needs: the console on COM1, a
// reboot through the keyboard controller (the i8042 device), and a panic
// that reboots at once instead of hanging.
const baseCmdline = "console=ttyS0 reboot=k panic=-1"

// pvmCmdline helps a kernel whose every instruction is emulated: a preset
// loops-per-jiffy skips delay calibration, a trusted TSC skips the
// clocksource watchdog, and no speculation mitigations means no verw.
// clearcpuid hides from the kernel what the emulator cannot run (see the
// PVM notes; clearing xsave also clears AVX and the rest that needs it):
// PVM's CPUID answers with the host's features whatever KVM_SET_CPUID2
// said, so the CPUID tinyvmm shapes never reaches the guest there.
const pvmCmdline = "lpj=1000000 tsc=reliable mitigations=off " +
	"clearcpuid=smap,fsgsbase,pcid,invpcid,serialize,cx16,xsave,popcnt,ssse3,sse4_1,sse4_2,pclmulqdq,aes,sha_ni,bmi2,adx"

// CommandArg is the kernel argument that hands argv to the guest's init:
// tinyvmm.cmd= and the unpadded base64url of the JSON array.
func CommandArg(argv []string) string {
	j, _ := json.Marshal(argv) // a []string always marshals
	return "tinyvmm.cmd=" + base64.RawURLEncoding.EncodeToString(j)
}

// noPCICmdline is for a VM without PCI devices: the kernel skips probing
// and scanning the bus (pci_subsys_init alone took 70 ms of a 1.7 s boot in
// nested L2, each config access being two port exits).
const noPCICmdline = "pci=off"

// kernelCmdline assembles the command line: tinyvmm's arguments first, so
// the user's --append can override them, then the command. pci says the VM
// has PCI devices.
func kernelCmdline(host kvm.Host, pci bool, userArgs string, argv []string) string {
	parts := []string{baseCmdline}
	if host.PVM {
		parts = append(parts, pvmCmdline)
	}
	if !pci {
		parts = append(parts, noPCICmdline)
	}
	if len(argv) > 0 {
		// With a command, stdout is the command's output: no boot log
		// (--append loglevel=7 brings it back).
		parts = append(parts, "quiet")
	}
	if s := strings.TrimSpace(userArgs); s != "" {
		parts = append(parts, s)
	}
	if len(argv) > 0 {
		parts = append(parts, CommandArg(argv))
	}
	return strings.Join(parts, " ")
}

// GuestCmdline is the command line tinyvmm gives a guest without a NIC on a
// KVM that is not PVM: the boot benchmark hands QEMU the same one.
func GuestCmdline(userArgs string, argv []string) string {
	return kernelCmdline(kvm.Host{Usable: true}, false, userArgs, argv)
}
