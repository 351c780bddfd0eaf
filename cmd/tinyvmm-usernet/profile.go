package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"tinyvmm/userproc"
)

// profile writes the CPU profile asked for by userproc.ProfileEnv, one
// file per segment, until the process is killed.
func profile(prefix string) {
	for n := 1; ; n++ {
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
		time.Sleep(userproc.ProfileSegment)
		pprof.StopCPUProfile()
		f.Close()
	}
}
