package e2e

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/uring"
)

// The ceiling: the same frames through the same kind of tap with no VM at
// all. A program writes and reads the tap fd directly, where a VMM's
// device would; what it reaches bounds every VMM on this machine.

const vnetHdrLen = 12 // struct virtio_net_hdr_v1, as the VMMs use the tap

// CeilingMAC is the ceiling's "guest" address on the tap.
var CeilingMAC = net.HardwareAddr{0x52, 0x54, 0, 0xce, 0x11, 0x01}

// openTapFD attaches to the namespace's tap like a VMM does; call it
// inside the namespace.
func openTapFD(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("attach to tap %s: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tap vnet header size: %w", err)
	}
	return fd, nil
}

// CeilingResult is the ceiling's own count, like a guest's result line.
type CeilingResult struct {
	Frames   uint64
	Duration time.Duration
	Rx       seqCounter
	Replies  uint64
	Calls    uint64 // tx: system calls that wrote Frames
}

// PPS is frames per second over the measured duration.
func (r CeilingResult) PPS() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Frames) / r.Duration.Seconds()
}

// withTap runs f with the namespace's tap open, on a thread placed where
// a VMM's device runs (pin may be nil).
func withTap(ns *Namespace, pin *pinning, f func(fd int) error) error {
	return ns.Do(func() error {
		back, err := pin.placeDevice()
		if err != nil {
			return err
		}
		defer back()
		fd, err := openTapFD(TapName)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return f(fd)
	})
}

// writeFrame writes one frame behind a zero virtio-net header; false when
// the tap's queue is full.
func writeFrame(fd int, buf []byte) (bool, error) {
	_, err := unix.Write(fd, buf)
	if tapRefused(err) {
		return false, nil
	}
	return err == nil, err
}

// tapRefused reports whether a write to the tap failed for want of room
// or by a signal, which a flood counts as a frame not sent, not an error.
func tapRefused(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS)
}

// CeilingTx floods size-byte bench frames into the tap for dur, as a
// guest's tx would arrive from a device, the cheapest way a user-space
// device has: through io_uring, ceilingGroup frames per io_uring_enter on
// the tap as a fixed file, where the kernel has io_uring (as tinyvmm's
// device does by default); else one write(2) each.
func CeilingTx(ns *Namespace, size int, dur time.Duration, pin *pinning) (CeilingResult, error) {
	var r CeilingResult
	err := withTap(ns, pin, func(fd int) error {
		ring, err := uring.New(ceilingGroup)
		if err != nil {
			return floodByWrite(fd, size, dur, &r)
		}
		defer ring.Close()
		return floodByRing(ring, fd, size, dur, &r)
	})
	return r, err
}

// ceilingGroup is how many frames the ceiling's tx hands the kernel per
// io_uring_enter: a whole batch of vhost-net's (VHOST_NET_BATCH), and
// the most tinyvmm's device sends in one, so that the ceiling stays a
// bound on it.
const ceilingGroup = 64

func floodByWrite(fd, size int, dur time.Duration, r *CeilingResult) error {
	buf := make([]byte, vnetHdrLen+size)
	start := time.Now()
	for seq := uint64(0); ; seq++ {
		if seq%ceilingGroup == 0 && time.Since(start) >= dur {
			break
		}
		BuildFrame(buf[vnetHdrLen:], seq, CeilingMAC, SinkMAC, GuestIP, HostIP)
		ok, err := writeFrame(fd, buf)
		if err != nil {
			return fmt.Errorf("write tap: %w", err)
		}
		r.Calls++
		if ok {
			r.Frames++
		}
	}
	r.Duration = time.Since(start)
	return nil
}

func floodByRing(ring *uring.Ring, fd, size int, dur time.Duration, r *CeilingResult) error {
	if err := ring.RegisterFile(fd); err != nil {
		return err
	}
	frames := make([][]byte, ceilingGroup)
	iovs := make([][]unix.Iovec, ceilingGroup)
	for i := range frames {
		frames[i] = make([]byte, vnetHdrLen+size)
		iovs[i] = []unix.Iovec{{Base: &frames[i][0]}}
		iovs[i][0].SetLen(len(frames[i]))
	}
	start := time.Now()
	for seq := uint64(0); time.Since(start) < dur; seq += ceilingGroup {
		for i, f := range frames {
			BuildFrame(f[vnetHdrLen:], seq+uint64(i), CeilingMAC, SinkMAC, GuestIP, HostIP)
			ring.Write(fd, iovs[i], uint64(i))
		}
		calls, err := ring.Submit(ceilingGroup)
		r.Calls += uint64(calls)
		if err != nil {
			return fmt.Errorf("write tap: %w", err)
		}
		ring.Reap(func(_ uint64, res int32) {
			switch e := unix.Errno(-res); {
			case res > 0:
				r.Frames++
			case err == nil && !tapRefused(e):
				err = fmt.Errorf("write tap: %w", e)
			}
		})
		if err != nil {
			return err
		}
	}
	r.Duration = time.Since(start)
	return nil
}

// CeilingRx reads bench frames from the tap for dur after the first one
// (ending early after a second of silence, or after wait without any).
// ready is closed once the tap is attached.
func CeilingRx(ns *Namespace, dur, wait time.Duration, ready chan<- struct{}, pin *pinning) (CeilingResult, error) {
	var r CeilingResult
	err := withTap(ns, pin, func(fd int) error {
		close(ready)
		buf := make([]byte, vnetHdrLen+2048)
		var first, last time.Time
		begin := time.Now()
		for {
			now := time.Now()
			if first.IsZero() && now.Sub(begin) > wait {
				break
			}
			if !first.IsZero() && (now.Sub(first) > dur || now.Sub(last) > time.Second) {
				break
			}
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				pollIn(fd, 10*time.Millisecond)
				continue
			}
			if err != nil {
				return fmt.Errorf("read tap: %w", err)
			}
			if n <= vnetHdrLen {
				continue
			}
			good := r.Rx.Good
			r.Rx.add(buf[vnetHdrLen:n])
			if r.Rx.Good > good {
				if first.IsZero() {
					first = now
				}
				last = now
			}
		}
		r.Frames, r.Duration = r.Rx.Good, last.Sub(first)
		return nil
	})
	return r, err
}

func pollIn(fd int, d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, int(d.Milliseconds()))
}

// CeilingEcho answers ARP and ping on the tap for dur, as the guest's echo
// mode does; with flood it also writes size-byte frames between reads.
func CeilingEcho(ns *Namespace, flood bool, size int, dur time.Duration, ready chan<- struct{}, pin *pinning) (CeilingResult, error) {
	var r CeilingResult
	err := withTap(ns, pin, func(fd int) error {
		close(ready)
		in := make([]byte, vnetHdrLen+2048)
		out := make([]byte, vnetHdrLen+size)
		start := time.Now()
		var seq uint64
		for time.Since(start) < dur {
			n, err := unix.Read(fd, in)
			switch {
			case err == nil && n > vnetHdrLen:
				if reply := echoReply(in[vnetHdrLen:n], CeilingMAC, GuestIP); reply != nil {
					if _, err := writeFrame(fd, append(make([]byte, vnetHdrLen), reply...)); err != nil {
						return err
					}
					r.Replies++
				}
				continue
			case err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
				return fmt.Errorf("read tap: %w", err)
			}
			if !flood {
				pollIn(fd, 10*time.Millisecond)
				continue
			}
			for i := 0; i < 32; i++ {
				BuildFrame(out[vnetHdrLen:], seq, CeilingMAC, SinkMAC, GuestIP, HostIP)
				if ok, err := writeFrame(fd, out); err != nil {
					return err
				} else if ok {
					seq++
				}
			}
		}
		r.Frames, r.Duration = seq, time.Since(start)
		return nil
	})
	return r, err
}
