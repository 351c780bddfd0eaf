package vmm

import (
	"bytes"
	"strings"
	"sync"
)

// panicMarker starts the line Linux's panic() prints (KERN_EMERG, so even
// a quiet boot shows it).
const panicMarker = "Kernel panic - not syncing: "

// noInitReasons are the panics of a kernel that found nothing to run as
// init (init/main.c, init/do_mounts.c of Linux 6.1).
var noInitReasons = []string{"No working init found", "Requested init ", "VFS: Unable to mount root fs"}

// panicWatcher passes the console through and remembers the first kernel
// panic line. The guest's reboot after it (panic=-1) then reads as a
// panic, not a reboot.
type panicWatcher struct {
	w    interface{ Write([]byte) (int, error) }
	mu   sync.Mutex
	line []byte
	msg  string
	seen bool
}

// maxLine bounds the line kept: a console without newlines cannot grow it.
const maxLine = 512

func (p *panicWatcher) Write(b []byte) (int, error) {
	p.mu.Lock()
	for rest := b; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if room := maxLine - len(p.line); room > 0 {
			p.line = append(p.line, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		p.endLine()
		rest = rest[i+1:]
	}
	p.mu.Unlock()
	return p.w.Write(b)
}

func (p *panicWatcher) endLine() {
	line := strings.TrimRight(string(p.line), "\r")
	p.line = p.line[:0]
	if i := strings.Index(line, panicMarker); i >= 0 && !p.seen {
		p.seen, p.msg = true, strings.TrimSpace(line[i+len(panicMarker):])
	}
}

// explain turns a reboot or triple fault that followed a panic line into
// a panic (or no-init) stop; other stops pass unchanged.
func (p *panicWatcher) explain(s GuestStop) GuestStop {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.line) > 0 {
		p.endLine() // the panic line may be the last, without its newline
	}
	if !p.seen || (s.Reason != StopReboot && s.Reason != StopTripleFault) {
		return s
	}
	for _, r := range noInitReasons {
		if strings.HasPrefix(p.msg, r) {
			return GuestStop{Reason: StopNoInit, Detail: p.msg}
		}
	}
	return GuestStop{Reason: StopPanic, Detail: p.msg}
}
