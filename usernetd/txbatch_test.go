package usernetd

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With the device not reading, the batcher takes super-frames only up to
// its bound in bytes (the one queued and the one being sent), then Write
// waits: counted in frames alone, its 256 frames of 64 KiB held 16 MiB,
// and as much again in spare buffers.
func TestTxBatcherBoundsItsBytes(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0]) // the device's end, never read
	const sockBuf = 256 << 10
	if err := unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuf); err != nil {
		t.Fatal(err)
	}
	uc, err := unixConn(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	tx := newTxBatcher(rc)
	const frame = 64 << 10
	const frames = 400 // 25 MiB: more than any bound
	var taken atomic.Int64
	done := make(chan error, 1)
	go func() {
		hdr, f := make([]byte, maxVnetHdr), make([]byte, frame-maxVnetHdr)
		for range frames {
			if err := tx.write(hdr, f); err != nil {
				done <- err
				return
			}
			taken.Add(1)
		}
		done <- nil
	}()
	// Wait until the writer stops taking frames: a slow machine can only
	// make the count lower, never higher.
	last := int64(-1)
	for taken.Load() != last && taken.Load() < frames {
		last = taken.Load()
		time.Sleep(300 * time.Millisecond)
	}
	// What the socket holds, a batch being sent, the queue; each bound
	// may be passed by one frame.
	limit := int64((sockBuf*2 + 2*txQueueBytes + 3*frame) / frame)
	if n := taken.Load(); n > limit {
		t.Errorf("the batcher took %d frames of 64 KiB (%d MiB) with the device not reading; want at most %d", n, n*frame>>20, limit)
	}
	tx.mu.Lock()
	if tx.spared > txQueueBytes {
		t.Errorf("spare buffers keep %d bytes, want at most %d", tx.spared, txQueueBytes)
	}
	tx.mu.Unlock()
	uc.Close() // the waiting write ends
	tx.stop()
	if err := <-done; err == nil && taken.Load() < frames {
		t.Error("the waiting write returned no error once the link closed")
	}
}
