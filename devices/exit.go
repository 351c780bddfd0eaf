package devices

// Ports of the devices that end the guest.
const (
	// ExitPort is tinyvmm's exit device: a 1..4-byte write of N ends the VM
	// and tinyvmm exits with status N&0xff. The guest's init writes its
	// command's status there through /dev/port.
	ExitPort = 0x501
	// I8042CommandPort is the PC keyboard controller's command port; the
	// command 0xfe pulses the CPU reset line (Linux reboot=k).
	I8042CommandPort = 0x64
	i8042Reset       = 0xfe
)

// ExitDevice is the device at ExitPort. It calls exit once per write, with
// the status the guest wrote; what that does to the VM is the VMM's
// business (vmm/ keeps the first stop).
type ExitDevice struct {
	exit func(status int)
}

// NewExitDevice makes the exit device; exit is called from a vCPU thread.
func NewExitDevice(exit func(status int)) *ExitDevice { return &ExitDevice{exit: exit} }

// Read implements BusDevice: the port reads as 0.
func (d *ExitDevice) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
}

// Write implements BusDevice: a 1..4-byte little-endian value ends the VM.
func (d *ExitDevice) Write(offset uint64, data []byte) {
	if offset != 0 || len(data) < 1 || len(data) > 4 {
		return
	}
	var n uint32
	for i, b := range data {
		n |= uint32(b) << (8 * i)
	}
	d.exit(int(n & 0xff))
}

// I8042 is just enough of the PC keyboard controller for a reboot: the
// status port reads 0 (input buffer empty, so Linux's kb_wait does not
// spin) and command 0xfe resets the machine.
type I8042 struct {
	reset func()
}

// NewI8042 makes the reset-only keyboard controller at I8042CommandPort;
// reset is called from a vCPU thread.
func NewI8042(reset func()) *I8042 { return &I8042{reset: reset} }

// Read implements BusDevice.
func (d *I8042) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
}

// Write implements BusDevice.
func (d *I8042) Write(offset uint64, data []byte) {
	if offset == 0 && len(data) >= 1 && data[0] == i8042Reset {
		d.reset()
	}
}
