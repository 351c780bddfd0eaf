package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Run with -race: writers and a reader at once.
func TestConcurrentWriteAndString(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				b.Write([]byte("ab"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 400) {
		t.Fatalf("got %d bytes, want 800 of abab...", len(got))
	}
}
