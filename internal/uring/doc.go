// Package uring is a minimal io_uring over golang.org/x/sys/unix: one ring,
// readv and writev requests, submit-and-wait, reap. It exists so that the
// virtio-net worker can move a batch of frames on a tap (which takes no
// sendmmsg) with one system call.
//
// Why hand-written and not a library: no io_uring module (giouring,
// iouring-go, go-uring, gouring) is served by the Go module proxy that this
// project's machines reach, and the worker needs only a sliver of io_uring
// (no SQPOLL, no registered buffers, no goroutines waiting on completions:
// every request it submits completes before io_uring_enter returns). The
// rings are read and written with sync/atomic, which gives the acquire and
// release ordering the io_uring ABI asks for.
package uring
