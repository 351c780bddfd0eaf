package virtio9p

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
)

// TestOpenFilesBounded: a guest that opens file after file, never
// clunking, gets ENFILE once it holds the share's limit of host files,
// and the VMM's fd table stops growing there.
func TestOpenFilesBounded(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	const limit = 50
	s, err := sharefs.OpenWith(dir, sharefs.Limits{NodeMemory: 1 << 20, OpenFiles: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g := newGuest(t, s)
	g.mount()
	// One open and clunk first: whatever the runtime opens once per
	// process for the first file (netpoll's fds) is not the guest's.
	wantType(t, g.exchange(twalk(2, 1, 99, "f"), 200), msgRwalk, 2)
	wantType(t, g.exchange(msg(msgTlopen, 3, uint32(99), uint32(0)), 200), msgRlopen, 3)
	wantType(t, g.exchange(msg(msgTclunk, 4, uint32(99)), 200), 121, 4)
	fds0 := countFDs(t)
	refused := 0
	for i := range 3 * limit {
		fid := uint32(100 + i)
		wantType(t, g.exchange(twalk(2, 1, fid, "f"), 200), msgRwalk, 2)
		r := g.exchange(msg(msgTlopen, 3, fid, uint32(0)), 200)
		if typ, _ := header(t, r); typ == msgRlopen {
			continue
		}
		wantLerror(t, r, 3, uint32(unix.ENFILE))
		refused++
	}
	if refused != 2*limit {
		t.Fatalf("%d of %d opens refused, want %d", refused, 3*limit, 2*limit)
	}
	if grew := countFDs(t) - fds0; grew > limit {
		t.Fatalf("the VMM holds %d more fds after %d opens, over the limit of %d", grew, 3*limit, limit)
	}
	// Clunking one open fid makes room for one more open.
	wantType(t, g.exchange(msg(msgTclunk, 4, uint32(100)), 200), 121, 4)
	wantType(t, g.exchange(msg(msgTlopen, 5, uint32(100+limit), uint32(0)), 200), msgRlopen, 5)
	g.dev.Reset()
	waitFor(t, "the old session's files to close", func() bool { return s.OpenFiles() == 0 && s.Nodes() == 0 })
	if grew := countFDs(t) - fds0; grew > 0 {
		t.Fatalf("%d fds still held after the reset", grew)
	}
}

// TestFidsBounded: every fid holds a node in the VMM; past the share's
// limit a walk to a new fid gets ENFILE. A reset gives them all back.
// (Clones of the root fid: each costs NodeCost and the path ".".)
func TestFidsBounded(t *testing.T) {
	dir := t.TempDir()
	const limit = 64
	s, err := sharefs.OpenWith(dir, sharefs.Limits{NodeMemory: limit * (sharefs.NodeCost + len(".")), OpenFiles: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g := newGuest(t, s)
	g.mount() // fid 1: one node
	held := 1
	for i := range 2 * limit {
		r := g.exchange(twalk(2, 1, uint32(10+i)), 200)
		if typ, _ := header(t, r); typ == msgRwalk {
			held++
			continue
		}
		wantLerror(t, r, 2, uint32(unix.ENFILE))
	}
	if held != limit {
		t.Fatalf("the guest holds %d fids, want the limit %d", held, limit)
	}
	if n := s.Nodes(); n != limit {
		t.Fatalf("share counts %d nodes, want %d", n, limit)
	}
	// The session ends at the reset; its server drops every fid.
	g.dev.Reset()
	waitFor(t, "the old session's nodes to close", func() bool { return s.Nodes() == 0 })
}

// waitFor polls cond until it holds, failing after 10 s: for work the
// device leaves to a goroutine that must end, however loaded the machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
