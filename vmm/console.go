package vmm

import (
	"errors"
	"io"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// EscapeHelp is printed once at start in interactive mode.
const EscapeHelp = "tinyvmm: press Ctrl-A x to quit (Ctrl-A Ctrl-A sends Ctrl-A)"

const ctrlA = 0x01

// firstOutputWriter passes the guest's console through and remembers when
// its first byte arrived (for --stats).
type firstOutputWriter struct {
	w     io.Writer
	once  sync.Once
	mu    sync.Mutex
	first time.Time
}

func (f *firstOutputWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		f.once.Do(func() {
			f.mu.Lock()
			f.first = time.Now()
			f.mu.Unlock()
		})
	}
	return f.w.Write(p)
}

func (f *firstOutputWriter) firstAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// escapeFilter removes the Ctrl-A escape from console input: Ctrl-A x
// calls quit, Ctrl-A Ctrl-A is one Ctrl-A, Ctrl-A and anything else pass.
type escapeFilter struct {
	quit     func()
	sawCtrlA bool
}

// filter returns the bytes for the guest and whether quit was requested.
func (f *escapeFilter) filter(in []byte) ([]byte, bool) {
	out := make([]byte, 0, len(in))
	for _, b := range in {
		switch {
		case f.sawCtrlA:
			f.sawCtrlA = false
			switch b {
			case 'x', 'X':
				return out, true
			case ctrlA:
				out = append(out, ctrlA)
			default:
				out = append(out, ctrlA, b)
			}
		case b == ctrlA:
			f.sawCtrlA = true
		default:
			out = append(out, b)
		}
	}
	return out, false
}

// errReaderClosed ends a cancellableReader.
var errReaderClosed = errors.New("console input closed")

// cancellableReader reads a file descriptor (the terminal) with poll, so
// teardown can stop the input goroutine instead of leaving it blocked in
// read(2).
type cancellableReader struct {
	fd     int
	cancel int // an eventfd; readable once cancelled
}

func newCancellableReader(fd int) (*cancellableReader, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &cancellableReader{fd: fd, cancel: efd}, nil
}

func (r *cancellableReader) Read(p []byte) (int, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}, {Fd: int32(r.cancel), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return 0, err
		}
		if fds[1].Revents != 0 {
			return 0, errReaderClosed
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(r.fd, p)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// stop wakes a blocked Read for good.
func (r *cancellableReader) stop() { signalEventfd(r.cancel) }

func (r *cancellableReader) close() { unix.Close(r.cancel) }
