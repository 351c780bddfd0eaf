package netbackend

import (
	"errors"
	"fmt"
	"sync"
)

// SocketPairs is a multi-queue Backend of one SocketPair per queue pair,
// for tests of multiqueue: Pairs[i].Peer plays the host side of pair i.
// It records which queues the device attached (Enabled).
type SocketPairs struct {
	Pairs []*SocketPair

	mu      sync.Mutex
	enabled []bool
}

// NewSocketPairs returns n socketpairs as one backend; only the first
// queue is enabled, as on a tap whose device started with one pair.
func NewSocketPairs(n int) (*SocketPairs, error) {
	s := &SocketPairs{enabled: make([]bool, n)}
	for range n {
		sp, err := NewSocketPair()
		if err != nil {
			s.Close()
			return nil, err
		}
		sp.SingleFrame = true
		s.Pairs = append(s.Pairs, sp)
	}
	s.enabled[0] = true
	return s, nil
}

// Name implements virtionet.Backend.
func (s *SocketPairs) Name() string { return "socketpairs" }

// Fd implements virtionet.Backend: the first pair's.
func (s *SocketPairs) Fd() int { return s.Pairs[0].Fd() }

// Offloads implements virtionet.Backend.
func (s *SocketPairs) Offloads() uint { return s.Pairs[0].Offloads() }

// SetVnetHdrSize implements virtionet.Backend.
func (s *SocketPairs) SetVnetHdrSize(n int) error {
	for _, p := range s.Pairs {
		p.SetVnetHdrSize(n)
	}
	return nil
}

// SetOffload implements virtionet.Backend.
func (s *SocketPairs) SetOffload(flags uint) error {
	for _, p := range s.Pairs {
		p.SetOffload(flags)
	}
	return nil
}

// QueueFds implements virtionet.MultiQueue.
func (s *SocketPairs) QueueFds() []int {
	fds := make([]int, len(s.Pairs))
	for i, p := range s.Pairs {
		fds[i] = p.Fd()
	}
	return fds
}

// SetQueueEnabled implements virtionet.MultiQueue; it only records the state.
func (s *SocketPairs) SetQueueEnabled(i int, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.enabled) {
		return fmt.Errorf("socketpairs: no queue %d", i)
	}
	s.enabled[i] = on
	return nil
}

// Enabled returns which queues are attached.
func (s *SocketPairs) Enabled() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.enabled...)
}

// Close implements virtionet.Backend: it closes the device's ends.
func (s *SocketPairs) Close() error {
	var errs []error
	for _, p := range s.Pairs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
