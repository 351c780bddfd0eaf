package virtionet

import (
	"io"
	"strconv"
	"time"
)

// tracer writes one compact line per datapath event:
//
//	+12.345678 tx kick
//	+12.345690 tx pop head=3 bufs=2
//	+12.345702 tx budget pkts=256 bytes=11008
//	+12.345709 rx popped chains=64
//	+12.345710 rx batch 64
//	+12.345711 rx used published
//	+12.345712 rx irq
//
// A nil *tracer is off and costs one branch per event.
type tracer struct {
	w     io.Writer
	start time.Time
	buf   []byte
}

func newTracer(w io.Writer) *tracer {
	if w == nil {
		return nil
	}
	return &tracer{w: w, start: time.Now(), buf: make([]byte, 0, 96)}
}

// event writes "+seconds queue what [k=v ...]"; vals pair with keys, and an
// empty key prints the bare number.
func (t *tracer) event(queue, what string, kv ...any) {
	b := t.buf[:0]
	b = append(b, '+')
	b = strconv.AppendFloat(b, time.Since(t.start).Seconds(), 'f', 6, 64)
	b = append(b, ' ')
	b = append(b, queue...)
	b = append(b, ' ')
	b = append(b, what...)
	for i := 0; i+1 < len(kv); i += 2 {
		b = append(b, ' ')
		if k, _ := kv[i].(string); k != "" {
			b = append(b, k...)
			b = append(b, '=')
		}
		switch v := kv[i+1].(type) {
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case uint16:
			b = strconv.AppendUint(b, uint64(v), 10)
		case string:
			b = append(b, v...)
		}
	}
	b = append(b, '\n')
	t.w.Write(b)
	t.buf = b
}
