package uring

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRing skips where io_uring is missing or disabled.
func newRing(t *testing.T, entries uint32) *Ring {
	t.Helper()
	r, err := New(entries)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// seqpacket returns a non-blocking end and its peer: one message per
// frame, as on a tap.
func seqpacket(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func iov(b []byte) unix.Iovec {
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}

func TestWritevBatchOneEnter(t *testing.T) {
	r := newRing(t, 8)
	fd, peer := seqpacket(t)
	// Each message gathers two buffers, as a frame gathers header and data.
	iovs := make([][]unix.Iovec, 5)
	for i := range iovs {
		iovs[i] = []unix.Iovec{iov([]byte{'h', byte('0' + i)}), iov(bytes.Repeat([]byte{byte('a' + i)}, 10+i))}
		if !r.Writev(fd, iovs[i], uint64(100+i)) {
			t.Fatalf("ring refused request %d", i)
		}
	}
	if r.Queued() != 5 {
		t.Fatalf("queued %d, want 5", r.Queued())
	}
	calls, err := r.Submit(5)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("%d io_uring_enter calls for one batch, want 1", calls)
	}
	got := map[uint64]int32{}
	if n := r.Reap(func(u uint64, res int32) { got[u] = res }); n != 5 {
		t.Fatalf("reaped %d completions, want 5", n)
	}
	for i := range 5 {
		if got[uint64(100+i)] != int32(12+i) {
			t.Errorf("request %d: res %d, want %d", i, got[uint64(100+i)], 12+i)
		}
	}
	buf := make([]byte, 64)
	for i := range 5 {
		n, err := unix.Read(peer, buf)
		want := append([]byte{'h', byte('0' + i)}, bytes.Repeat([]byte{byte('a' + i)}, 10+i)...)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("message %d: %q, %v; want %q (in order)", i, buf[:n], err, want)
		}
	}
	if r.Queued() != 0 || r.Reap(func(uint64, int32) {}) != 0 {
		t.Error("ring not empty after a reaped batch")
	}
}

func TestReadvStopsWithEAGAIN(t *testing.T) {
	r := newRing(t, 4)
	fd, peer := seqpacket(t)
	for _, m := range []string{"first", "second"} {
		if _, err := unix.Write(peer, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([][]byte, 3)
	iovs := make([][]unix.Iovec, 3)
	for i := range bufs {
		bufs[i] = make([]byte, 32)
		iovs[i] = []unix.Iovec{iov(bufs[i])}
		r.Readv(fd, iovs[i], uint64(i))
	}
	if _, err := r.Submit(3); err != nil {
		t.Fatal(err)
	}
	res := make([]int32, 3)
	r.Reap(func(u uint64, v int32) { res[u] = v })
	if res[0] != 5 || res[1] != 6 || string(bufs[0][:5]) != "first" || string(bufs[1][:6]) != "second" {
		t.Errorf("reads: %v %q %q", res, bufs[0][:5], bufs[1][:6])
	}
	if res[2] != -int32(unix.EAGAIN) {
		t.Errorf("read of an empty non-blocking socket: res %d, want -EAGAIN", res[2])
	}
}

// A write to a full socket completes with -EAGAIN at once: Submit never
// waits for room.
func TestWritevToFullSocketDoesNotWait(t *testing.T) {
	r := newRing(t, 4)
	fd, _ := seqpacket(t)
	msg := []unix.Iovec{iov(make([]byte, 1000))}
	for {
		if _, err := unix.Writev(fd, [][]byte{make([]byte, 1000)}); err != nil {
			break // full
		}
	}
	r.Writev(fd, msg, 7)
	done := make(chan int32, 1)
	go func() {
		r.Submit(1)
		var got int32 = 1
		r.Reap(func(_ uint64, res int32) { got = res })
		done <- got // after Reap: the ring is unmapped once the test returns
	}()
	select {
	case res := <-done:
		if res != -int32(unix.EAGAIN) {
			t.Errorf("write to a full socket: res %d, want -EAGAIN", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Submit waited for room in a full socket")
	}
}

func TestFullRingAndBadFd(t *testing.T) {
	r := newRing(t, 2)
	b := []unix.Iovec{iov([]byte("x"))}
	n := 0
	for r.Writev(-1, b, uint64(n)) {
		n++
		if n > 64 {
			t.Fatal("ring never reports full")
		}
	}
	if n != r.Entries() {
		t.Errorf("took %d requests, ring has %d entries", n, r.Entries())
	}
	if r.Writev(0, nil, 0) {
		t.Error("an empty iovec was queued")
	}
	if _, err := r.Submit(n); err != nil {
		t.Fatal(err)
	}
	bad := 0
	r.Reap(func(_ uint64, res int32) {
		if res == -int32(unix.EBADF) {
			bad++
		}
	})
	if bad != n {
		t.Errorf("%d of %d writes to fd -1 failed with EBADF", bad, n)
	}
	// The ring is reusable after a full round.
	if !r.Writev(-1, b, 0) {
		t.Error("ring still full after reaping")
	}
	r.discard()
}

func TestCloseTwice(t *testing.T) {
	r := newRing(t, 4)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(fmt.Errorf("second close: %w", err))
	}
}

// TestRegisterFileReadsTheRegisteredFile: once fd is the ring's fixed file,
// requests on fd reach the file registered, not whatever fd names in the
// file table later (here another socket dup2'd over it): the ring no
// longer looks fd up per request.
func TestRegisterFileReadsTheRegisteredFile(t *testing.T) {
	r := newRing(t, 4)
	fd, peer := seqpacket(t)
	if err := r.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	other, _ := seqpacket(t)
	if err := unix.Dup2(other, fd); err != nil { // fd now names the other socket
		t.Fatal(err)
	}
	if _, err := unix.Write(peer, []byte("registered")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	iovs := []unix.Iovec{iov(buf)}
	if !r.Readv(fd, iovs, 7) {
		t.Fatal("ring refused the read")
	}
	if _, err := r.Submit(1); err != nil {
		t.Fatal(err)
	}
	var res int32
	r.Reap(func(_ uint64, v int32) { res = v })
	if res != int32(len("registered")) || string(buf[:res]) != "registered" {
		t.Fatalf("read res %d (%q), want the registered socket's message", res, buf[:max(res, 0)])
	}
}

// opcodes returns the opcodes of the requests queued since the SQ tail
// was last handed to the kernel.
func (r *Ring) opcodes() []uint8 {
	var ops []uint8
	for i := r.tail - uint32(r.Queued()); i != r.tail; i++ {
		ops = append(ops, r.sqes[i&r.sqMask].opcode)
	}
	return ops
}

// Write sends a frame of one buffer as IORING_OP_WRITE and one of several
// as WRITEV, each a message of its own and in order; where the kernel
// lacks IORING_OP_WRITE, both go as WRITEV and arrive the same.
func TestWriteOneBufferWithoutIovec(t *testing.T) {
	for _, lacksWrite := range []bool{false, true} {
		t.Run(fmt.Sprint("lacksWrite=", lacksWrite), func(t *testing.T) {
			r := newRing(t, 8)
			if !r.write {
				t.Skip("this kernel lacks IORING_OP_WRITE")
			}
			if lacksWrite {
				r.write = false // as the probe at New finds on Linux before 5.6
			}
			fd, peer := seqpacket(t)
			one := []unix.Iovec{iov([]byte("one buffer"))}
			two := []unix.Iovec{iov([]byte("two ")), iov([]byte("buffers"))}
			if !r.Write(fd, one, 1) || !r.Write(fd, two, 2) {
				t.Fatal("ring refused a request")
			}
			want := []uint8{opWrite, opWritev}
			if lacksWrite {
				want = []uint8{opWritev, opWritev}
			}
			if got := r.opcodes(); !bytes.Equal(got, want) {
				t.Fatalf("opcodes %v, want %v", got, want)
			}
			if _, err := r.Submit(2); err != nil {
				t.Fatal(err)
			}
			res := map[uint64]int32{}
			r.Reap(func(ud uint64, v int32) { res[ud] = v })
			if res[1] != 10 || res[2] != 11 {
				t.Fatalf("results %v, want 1:10 2:11", res)
			}
			buf := make([]byte, 64)
			for _, want := range []string{"one buffer", "two buffers"} {
				n, err := unix.Read(peer, buf)
				if err != nil || string(buf[:n]) != want {
					t.Fatalf("peer read %q %v, want %q", buf[:max(n, 0)], err, want)
				}
			}
		})
	}
}

// The probe at New finds IORING_OP_WRITE on kernels that have it (every
// kernel since 5.6; the ring's own read and write ops of 5.1 always).
func TestProbeFindsOps(t *testing.T) {
	r := newRing(t, 4)
	var uts unix.Utsname
	unix.Uname(&uts)
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor)
	if major > 5 || major == 5 && minor >= 6 {
		if !r.write || !r.supports(opWritev) {
			t.Fatalf("on Linux %d.%d the probe found write=%v writev=%v, want both", major, minor, r.write, r.supports(opWritev))
		}
	}
	if r.supports(255) {
		t.Fatal("the probe claims opcode 255")
	}
}
