package usernetbench

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// serverTrace notes when the web server's connections were accepted,
// read, written and closed, one line each: "NS EVENT PORT N", PORT the
// peer's (the gateway's host socket's), on the clock tinyvmm-usernet's
// trace uses (userproc.TraceEnv), so the two line up.
type serverTrace struct {
	mu sync.Mutex
	w  *bufio.Writer
	f  *os.File
}

func newServerTrace(path string) (*serverTrace, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &serverTrace{w: bufio.NewWriterSize(f, 1<<20), f: f}, nil
}

func (t *serverTrace) note(what string, port, n int) {
	now := time.Now().UnixNano()
	t.mu.Lock()
	fmt.Fprintf(t.w, "%d %s %d %d\n", now, what, port, n)
	t.mu.Unlock()
}

func (t *serverTrace) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.Flush()
	return t.f.Close()
}

// tracedListener hands out tracedConns.
type tracedListener struct {
	net.Listener
	t *serverTrace
}

func (l tracedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc := c.(*net.TCPConn)
	port := tc.RemoteAddr().(*net.TCPAddr).Port
	l.t.note("accept", port, 0)
	return &tracedConn{TCPConn: tc, t: l.t, port: port}, nil
}

// tracedConn is a connection whose calls are noted; net/http half closes
// it (CloseWrite) after an answer with Connection: close.
type tracedConn struct {
	*net.TCPConn
	t    *serverTrace
	port int
}

func (c *tracedConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if err != nil {
		n = -1
	}
	c.t.note("read", c.port, n)
	return max(n, 0), err
}

func (c *tracedConn) Write(b []byte) (int, error) {
	c.t.note("write-start", c.port, len(b))
	n, err := c.TCPConn.Write(b)
	c.t.note("write-done", c.port, n)
	return n, err
}

func (c *tracedConn) CloseWrite() error {
	c.t.note("closewrite-start", c.port, 0)
	err := c.TCPConn.CloseWrite()
	c.t.note("closewrite-done", c.port, 0)
	return err
}

func (c *tracedConn) Close() error {
	c.t.note("close", c.port, 0)
	return c.TCPConn.Close()
}
