package scratchns_test

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
)

func TestNamespaceWithTapIsIsolated(t *testing.T) {
	n := netnstest.Setup(t)
	mac, err := n.AddTap("tap0", "10.0.2.1/24")
	if err != nil {
		t.Fatal(err)
	}
	if len(mac) != 6 {
		t.Errorf("tap mac %v", mac)
	}
	var inside []string
	if err := n.Do(func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			inside = append(inside, l.Attrs().Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.AddVeth("va", "vb"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(inside, ",") != "lo,tap0" {
		t.Errorf("links inside %v, want lo and tap0", inside)
	}
	// A socket opened inside is bound to the namespace's address.
	var fd int
	if err := n.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 1}})
	}); err != nil {
		t.Fatalf("bind to 10.0.2.1 inside: %v", err)
	}
	unix.Close(fd)
}

func TestCloseRemovesNamespace(t *testing.T) {
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	n, err := scratchns.New("tvt")
	if err != nil {
		t.Fatal(err)
	}
	name := n.Name
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Access("/var/run/netns/"+name, unix.F_OK); err == nil {
		t.Errorf("namespace %s still exists", name)
	}
}
