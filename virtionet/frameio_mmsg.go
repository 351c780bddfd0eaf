package virtionet

import (
	"math"

	"golang.org/x/sys/unix"
)

// mmsgIO moves a group of frames per sendmmsg or recvmmsg: a backend whose
// fd is a socket (MultiFramer).
type mmsgIO struct {
	mm []mmsghdr // one header per frame of the group
}

func (*mmsgIO) name() IOMode { return IOSendmmsg }

func (*mmsgIO) sendsBy(int) IOMode { return IOSendmmsg }

// headers points one message header at each frame's iovecs.
func (m *mmsgIO) headers(frames [][]unix.Iovec) []mmsghdr {
	if len(m.mm) < len(frames) {
		m.mm = make([]mmsghdr, len(frames))
	}
	for i, f := range frames {
		m.mm[i] = mmsghdr{}
		m.mm[i].hdr.Iov = &f[0]
		m.mm[i].hdr.SetIovlen(len(f))
	}
	return m.mm[:len(frames)]
}

func (m *mmsgIO) send(fd int, frames [][]unix.Iovec, res []int) (int, error) {
	mm := m.headers(frames)
	calls := 0
	for off := 0; off < len(mm); {
		calls++
		k, err := sendmmsg(fd, mm[off:])
		if err != nil || k == 0 {
			// The message at off was refused: drop it, send the rest;
			// unless the socket is full, where they all wait.
			if err == nil {
				err = unix.EIO
			}
			if res[off] = errnoResult(err); res[off] == resFull {
				break
			}
			off++
			continue
		}
		for i := off; i < off+k; i++ {
			res[i] = int(mm[i].len)
		}
		off += k
	}
	return calls, nil
}

func (m *mmsgIO) recv(fd int, slots [][]unix.Iovec, got []int) (int, int, error) {
	mm := m.headers(slots)
	k, err := recvmmsg(fd, mm)
	if err != nil {
		return 0, 1, readError(err)
	}
	for i := 0; i < k; i++ {
		if mm[i].len == 0 {
			return i, 1, errBackendEOF
		}
		got[i] = int(mm[i].len)
		if mm[i].hdr.Flags&unix.MSG_TRUNC != 0 {
			got[i] = math.MaxInt32 // cut to fit: longer than the slot
		}
	}
	if k == 0 {
		return 0, 1, errBackendEOF
	}
	if k < len(slots) {
		return k, 1, unix.EAGAIN
	}
	return k, 1, nil
}
