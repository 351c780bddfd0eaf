package netpkg

import (
	"net"
	"testing"
)

func TestEchoOverLoopback(t *testing.T) {
	got, err := Echo([]byte("ping"))
	if err != nil || string(got) != "ping" {
		t.Fatalf("Echo = %q, %v", got, err)
	}
}

func TestInterfacesHaveLoopback(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return
		}
	}
	t.Fatalf("no loopback among %v", ifs)
}
