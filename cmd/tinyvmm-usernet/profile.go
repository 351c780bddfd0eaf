package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"tinyvmm/userproc"
)

// profile writes the CPU profile asked for by userproc.ProfileEnv, one
// file per segment, until the process is killed. A segment is
// userproc.ProfileSegment long until the first SIGUSR1; from then on
// each SIGUSR1 (the benchmark's, at each of its cells) ends one, so that
// each cell has a file of its own. At each file's start a line of the
// Go runtime's memory and GC counters goes to PREFIX.gc (what carries
// over from one cell to the next: the heap, its goal, the collections,
// the page faults). It returns when stop is closed (never if nil).
func profile(prefix string, stop <-chan struct{}) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	gc, err := os.Create(prefix + ".gc")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: profile: %v\n", userproc.Program, err)
		return
	}
	defer gc.Close()
	byCell := false
	for n := 1; ; n++ {
		writeGCLine(gc, n)
		f, err := os.Create(fmt.Sprintf("%s.%d", prefix, n))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: profile: %v\n", userproc.Program, err)
			return
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "%s: profile: %v\n", userproc.Program, err)
			f.Close()
			return
		}
		var segment <-chan time.Time
		if !byCell {
			segment = time.After(userproc.ProfileSegment)
		}
		stopped := false
		select {
		case <-usr1:
			byCell = true
		case <-segment:
		case <-stop:
			stopped = true
		}
		pprof.StopCPUProfile()
		f.Close()
		if stopped {
			return
		}
	}
}

// writeGCLine writes file n's line of runtime counters to w.
func writeGCLine(w io.Writer, n int) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Fprintf(w, "file %d: gc %d pause %d us, heap alloc %d KiB sys %d KiB released %d KiB goal %d KiB, total alloc %d KiB mallocs %d, minflt %d, cpu %d ms\n",
		n, m.NumGC, m.PauseTotalNs/1000, m.HeapAlloc>>10, m.HeapSys>>10, m.HeapReleased>>10, m.NextGC>>10,
		m.TotalAlloc>>10, m.Mallocs, ru.Minflt, (ru.Utime.Nano()+ru.Stime.Nano())/1e6)
}
