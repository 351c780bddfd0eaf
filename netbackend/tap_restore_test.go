package netbackend_test

import (
	"testing"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
	"tinyvmm/netbackend"
)

// tunState returns the flags of the tap name inside ns, then opens it with
// exactly flags (as its owner would; creating it persistent if persist) and
// returns the vnet header size the kernel keeps for it.
func tunState(t *testing.T, ns *scratchns.NS, name string, flags uint16, persist bool) (netlink.TuntapFlag, int) {
	t.Helper()
	var got netlink.TuntapFlag
	var hdr int32
	if err := ns.Do(func() error {
		if !persist {
			got = tapFlags(t, name)
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return err
		}
		if persist {
			if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
				return err
			}
		}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNGETVNETHDRSZ, uintptr(unsafe.Pointer(&hdr))); e != 0 {
			return e
		}
		if persist {
			got = tapFlags(t, name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got, int(hdr)
}

// tapFlags reads the tap's flags through netlink; the caller is in its namespace.
func tapFlags(t *testing.T, name string) netlink.TuntapFlag {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("tap %s: %v", name, err)
	}
	tt, ok := l.(*netlink.Tuntap)
	if !ok {
		t.Fatalf("%s is a %T, not a tap", name, l)
	}
	return tt.Flags
}

// TestCloseRestoresExistingTapFlags: tinyvmm opens an existing tap with
// IFF_VNET_HDR and sets its vnet header size; both are the tap's own
// settings, which outlive the process. Close puts back what the tap had
// (here: no vnet_hdr, the default 10-byte header), also when Close runs on
// a thread outside the tap's namespace.
func TestCloseRestoresExistingTapFlags(t *testing.T) {
	ns := netnstest.Setup(t)
	const plain = unix.IFF_TAP | unix.IFF_NO_PI
	if f, hdr := tunState(t, ns, "tvplain0", plain, true); f&netlink.TUNTAP_VNET_HDR != 0 || hdr != 10 {
		t.Fatalf("new tap: flags %#x, header %d; want no vnet_hdr, 10", f, hdr)
	}
	var tap *netbackend.Tap
	if err := ns.Do(func() error {
		var err error
		tap, err = netbackend.OpenTap("tvplain0", 0)
		if err != nil {
			return err
		}
		if tap.Created {
			t.Error("OpenTap created tvplain0, which existed")
		}
		if err := tap.SetVnetHdrSize(12); err != nil {
			return err
		}
		if tapFlags(t, "tvplain0")&netlink.TUNTAP_VNET_HDR == 0 {
			t.Error("tvplain0 open without vnet_hdr")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName("tvplain0"); err == nil {
		t.Error("Close made a tvplain0 in the test's own namespace")
	}
	// Opened again as its owner opens it: what it had before tinyvmm.
	if f, hdr := tunState(t, ns, "tvplain0", plain, false); f&netlink.TUNTAP_VNET_HDR != 0 || hdr != 10 {
		t.Errorf("after Close: flags %#x, header %d; want no vnet_hdr, 10 as before", f, hdr)
	}
	// A tap that had vnet_hdr keeps it.
	if _, err := ns.AddTap("tvvnet0", "10.0.3.1/24"); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error {
		var err error
		tap, err = netbackend.OpenTap("tvvnet0", 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error {
		if tapFlags(t, "tvvnet0")&netlink.TUNTAP_VNET_HDR == 0 {
			t.Error("tvvnet0 lost vnet_hdr")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
