package virtio_test

import (
	"fmt"

	"tinyvmm/virtio/virtiotest"
)

// A device worker's loop over one queue: drain with notifications off,
// publish once, interrupt if the driver wants it, then re-enable
// notifications and re-check before sleeping on the kick eventfd.
func ExampleQueue() {
	drv := virtiotest.New(1 << 20)
	defer drv.Close()
	ring, _ := drv.NewQueue(8, virtiotest.RingOptions{EventIdx: true})
	ring.AddChain([][]byte{[]byte("hello")}, nil)
	ring.AddChain([][]byte{[]byte("world")}, nil)

	q := ring.Queue() // what the transport hands the device
	for {
		q.DisableNotify()
		for {
			c, ok, err := q.Pop()
			if err != nil {
				fmt.Println("guest broke the queue:", err) // Activation.Fail, stop using q
				return
			}
			if !ok {
				break
			}
			b, _ := drv.Mem.Slice(c.Bufs[0].Addr, uint64(c.Bufs[0].Len))
			fmt.Printf("chain %d: %s\n", c.Head, b)
			q.AddUsed(c.Head, 0)
		}
		q.PublishUsed()
		if q.NeedsInterrupt() {
			fmt.Println("interrupt")
		}
		if !q.EnableNotify() {
			break // nothing new: wait for a kick
		}
	}
	// Output:
	// chain 0: hello
	// chain 1: world
	// interrupt
}
