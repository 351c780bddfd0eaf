package usernetd

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// dialGuestTimeout bounds the handshake with the guest for one forwarded
// connection (a guest not listening answers with a reset at once).
const dialGuestTimeout = 10 * time.Second

// forwarder is one hostfwd: a host listener whose connections are spliced
// to a TCP connection into the virtual network, to the guest's port.
type forwarder struct {
	b     *Backend
	ln    net.Listener
	guest string // GuestIP:port

	mu    sync.Mutex
	conns map[net.Conn]bool // open on both sides, closed by close
	wg    sync.WaitGroup
}

func listenForward(b *Backend, f Forward) (*forwarder, error) {
	if f.GuestPort == 0 {
		return nil, fmt.Errorf("net user: hostfwd to guest port 0")
	}
	ln, err := net.Listen("tcp4", f.Host)
	if err != nil {
		return nil, fmt.Errorf("net user: hostfwd: %v", err)
	}
	return &forwarder{
		b: b, ln: ln, conns: map[net.Conn]bool{},
		guest: net.JoinHostPort(GuestIP, strconv.Itoa(int(f.GuestPort))),
	}, nil
}

func (fw *forwarder) start() {
	fw.wg.Add(1)
	go fw.accept()
}

func (fw *forwarder) accept() {
	defer fw.wg.Done()
	for {
		c, err := fw.ln.Accept()
		if err != nil {
			return // closed
		}
		fw.wg.Add(1)
		go func() {
			defer fw.wg.Done()
			fw.serve(c)
		}()
	}
}

// serve connects one host connection to the guest's port and copies both
// ways until either side is done.
func (fw *forwarder) serve(host net.Conn) {
	host = hostConn(host)
	ctx, cancel := context.WithTimeout(fw.b.ctx, dialGuestTimeout)
	guest, err := fw.b.vn.dialGuest(ctx, fw.guest)
	cancel()
	if err != nil {
		host.Close()
		return
	}
	if !fw.track(host, guest) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, err := copyGrowing(dst, src, 0, 0)
		cw, ok := dst.(interface{ CloseWrite() error })
		if err == nil && ok {
			cw.CloseWrite() // pass the end of data on, keep reading the other way
		} else {
			host.Close() // a reset or a failed write ends both ways
			guest.Close()
		}
		done <- struct{}{}
	}
	go pipe(guest, host)
	go pipe(host, guest)
	<-done
	<-done
	fw.untrack(host, guest)
}

// track records a spliced pair so close can end it; after close it closes
// the pair and says no.
func (fw *forwarder) track(cs ...net.Conn) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		fw.conns[c] = true
	}
	return true
}

func (fw *forwarder) untrack(cs ...net.Conn) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(fw.conns, c)
	}
}

// close stops listening, ends every forwarded connection and waits.
func (fw *forwarder) close() {
	fw.ln.Close()
	fw.mu.Lock()
	for c := range fw.conns {
		c.Close()
	}
	fw.conns = nil
	fw.mu.Unlock()
	fw.wg.Wait()
}

func fdFile(fd int) *os.File { return os.NewFile(uintptr(fd), "usernet") }
