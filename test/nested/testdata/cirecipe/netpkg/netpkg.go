// Package netpkg is the package README.md's "In CI" recipe builds in
// test/nested's TestNestedCIRecipe: it imports net, so without
// CGO_ENABLED=0 its test binary links against the C library (the cgo
// resolver), as most real packages' do.
package netpkg

import "net"

// Echo sends b over a TCP connection on the loopback and returns what came
// back.
func Echo(b []byte) ([]byte, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, len(b))
		n, _ := c.Read(buf)
		c.Write(buf[:n])
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	out := make([]byte, len(b))
	n, err := c.Read(out)
	return out[:n], err
}
