package usernetd

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// A lone frame (an ACK) is on the socket when write returns: the writer
// sends it itself, with no goroutine to wake (with one P, a woken
// goroutine would run only after the writer blocks). Frames written
// between hold and release go together, in one sendmmsg, at release.
func TestTxBatcherSendsInline(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	uc, err := unixConn(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	rc, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	tx := newTxBatcher(rc)
	defer tx.stop()
	buf := make([]byte, 2048)
	recv := func() int {
		n, _, err := unix.Recvfrom(fds[0], buf, unix.MSG_DONTWAIT)
		if err != nil {
			return -1
		}
		return n
	}
	if err := tx.write(make([]byte, 12), make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if n := recv(); n != 112 {
		t.Fatalf("after write, the device end reads %d bytes, want the frame's 112 at once", n)
	}
	calls := tx.calls.Load()
	tx.hold()
	for i := range 5 {
		if err := tx.write(make([]byte, 12), make([]byte, 200+i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := recv(); n != -1 {
		t.Fatalf("a frame of %d bytes went before release", n)
	}
	tx.release()
	for i := range 5 {
		if n := recv(); n != 212+i {
			t.Fatalf("frame %d after release: %d bytes, want %d", i, n, 212+i)
		}
	}
	if c := tx.calls.Load() - calls; c != 1 {
		t.Errorf("the held burst took %d sendmmsg calls, want 1", c)
	}
}
