// Package ptytest runs a program on a pseudo-terminal, the way a user's
// terminal runs it: the program's stdin, stdout and stderr are the pty,
// and it is the session leader with the pty as controlling terminal, so a
// Ctrl-C the line discipline turns into SIGINT reaches it as it would a
// user's. The test types on the master side, reads what the program
// printed, and looks at the terminal's mode (termios).
package ptytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PTY is one pseudo-terminal pair and everything read from it.
type PTY struct {
	master *os.File // the test's side: writes are typed, reads were printed
	slave  *os.File // the program's terminal; kept open so its mode outlives the program

	mu     sync.Mutex
	out    bytes.Buffer
	cursor int           // Expect searches from here
	grew   chan struct{} // closed and replaced whenever out grows
	done   chan struct{} // closed when the reader stops
}

// Open makes a pty pair (it needs devpts mounted at /dev/pts).
func Open() (*PTY, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w (is devpts mounted at /dev/pts?)", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pty number: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	slave, err := os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Non-blocking, so the File uses the poller and Close ends a Read.
	p := &PTY{master: os.NewFile(uintptr(fd), "/dev/ptmx"), slave: slave, grew: make(chan struct{}), done: make(chan struct{})}
	go p.read()
	return p, nil
}

func (p *PTY) read() {
	defer close(p.done)
	buf := make([]byte, 4096)
	for {
		n, err := p.master.Read(buf)
		p.mu.Lock()
		p.out.Write(buf[:n])
		if n > 0 {
			close(p.grew)
			p.grew = make(chan struct{})
		}
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Start runs cmd on the pty as a new session with the pty as its
// controlling terminal.
func (p *PTY) Start(cmd *exec.Cmd) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	return cmd.Start()
}

// Type writes s as if typed on the terminal's keyboard (Enter is "\r").
func (p *PTY) Type(s string) error {
	_, err := p.master.Write([]byte(s))
	return err
}

// Expect waits up to d for want to be printed after the previous match,
// and moves past it. The error carries the output's tail.
func (p *PTY) Expect(want string, d time.Duration) error {
	deadline := time.After(d)
	for {
		p.mu.Lock()
		rest := p.out.Bytes()[p.cursor:]
		if i := bytes.Index(rest, []byte(want)); i >= 0 {
			p.cursor += i + len(want)
			p.mu.Unlock()
			return nil
		}
		grew := p.grew
		p.mu.Unlock()
		select {
		case <-grew:
		case <-deadline:
			return fmt.Errorf("%q not printed within %v; output so far ends:\n%s", want, d, Tail(p.Output(), 30))
		case <-p.done:
			p.mu.Lock()
			found := bytes.Contains(p.out.Bytes()[p.cursor:], []byte(want))
			p.mu.Unlock()
			if !found {
				return fmt.Errorf("%q never printed (pty closed); output ends:\n%s", want, Tail(p.Output(), 30))
			}
		}
	}
}

// Flush waits until everything the program printed so far is in Output:
// it writes a marker on the program's side of the pty and waits for it.
func (p *PTY) Flush(d time.Duration) error {
	const marker = "<ptytest-flush>"
	if _, err := p.slave.Write([]byte(marker)); err != nil {
		return err
	}
	return p.Expect(marker, d)
}

// Output is everything printed so far.
func (p *PTY) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Termios is the terminal's current mode.
func (p *PTY) Termios() (*unix.Termios, error) {
	return unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
}

// Close closes both sides; the reader stops.
func (p *PTY) Close() {
	p.slave.Close()
	p.master.Close()
	<-p.done
}

// IsRaw reports whether t reads keys one by one, without echo and without
// turning Ctrl-C or Ctrl-Z into signals (what term.MakeRaw sets).
func IsRaw(t *unix.Termios) bool {
	return t.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) == 0 && t.Iflag&(unix.ICRNL|unix.IXON) == 0
}

// Diff names the fields that differ between two modes ("" if none).
func Diff(a, b *unix.Termios) string {
	var d []string
	field := func(name string, x, y uint32) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %#o -> %#o", name, x, y))
		}
	}
	field("iflag", a.Iflag, b.Iflag)
	field("oflag", a.Oflag, b.Oflag)
	field("cflag", a.Cflag, b.Cflag)
	field("lflag", a.Lflag, b.Lflag)
	if a.Cc != b.Cc {
		d = append(d, fmt.Sprintf("cc %v -> %v", a.Cc, b.Cc))
	}
	return strings.Join(d, "; ")
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
