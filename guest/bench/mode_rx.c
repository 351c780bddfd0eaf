/* mode=rx: count the peer's bench frames for secs seconds from the first
 * one, checking each checksum and the sequence for loss and reorder. The
 * guest polls, or with irq=1 halts whenever the ring is empty and goes on
 * at the device's interrupt, as a kernel's NAPI loop does: interrupts off
 * while it drains, on when it finds nothing, one more look, then halt. */
#include "bench.h"

#define FIRST_FRAME_WAIT_MS 30000
#define IDLE_END_MS 1000
#define RX_BATCH 64

struct rx_counts {
	u64 good, bad, other, lost, reordered, bytes, pktgen;
	u64 next_seq, first_tsc, last_tsc;
};

/* count_frame counts the bench's frames and those of the kernel's pktgen
 * (the harness's rx-sender=pktgen), which carry a sequence number but no
 * checksum to check. */
static void count_frame(struct rx_counts *c, const u8 *f, u32 len, u64 now)
{
	u64 seq;
	int r = frame_check(f, len, &seq);
	if (r == 0 && pktgen_check(f, len, &seq)) {
		r = 1;
		c->pktgen++;
	}
	if (r == 0) {
		c->other++;
		return;
	}
	if (r < 0) {
		c->bad++;
		return;
	}
	if (!c->good)
		c->first_tsc = now;
	c->last_tsc = now;
	c->good++;
	c->bytes += len;
	if (seq > c->next_seq)
		c->lost += seq - c->next_seq;
	if (seq < c->next_seq)
		c->reordered++;
	else
		c->next_seq = seq + 1;
}

void mode_rx(struct net *n, u64 secs)
{
	struct rx_counts c = {0};
	u64 ms = n->tsc_khz;
	u64 start = rdtsc();
	for (;;) {
		u64 now = rdtsc();
		int got = 0;
		u16 id;
		u8 *f;
		u32 len;
		while (got < RX_BATCH && rx_next(n, &id, &f, &len)) {
			count_frame(&c, f, len, now);
			rx_repost(n, id);
			got++;
		}
		if (got)
			vq_kick(&n->rx);
		if (!c.good && now - start > FIRST_FRAME_WAIT_MS * ms)
			break;
		if (c.good && (now - c.first_tsc > secs * 1000 * ms || now - c.last_tsc > IDLE_END_MS * ms))
			break;
		if (got)
			continue;
		if (!n->irq) {
			cpu_relax();
			continue;
		}
		if (!vq_arm(&n->rx)) {
			n->halts++;
			irq_wait();
		}
		vq_disarm(&n->rx);
	}
	if (n->irq)
		irq_stop();
	u64 tsc = c.last_tsc - c.first_tsc;
	serial_puts("BENCH result mode=rx");
	serial_kv("frames", c.good);
	serial_kv("bytes", c.bytes);
	serial_kv("bad", c.bad);
	serial_kv("lost", c.lost);
	serial_kv("reordered", c.reordered);
	serial_kv("other", c.other);
	serial_kv("pktgen", c.pktgen);
	serial_kv("tsc", tsc);
	serial_kv("usec", tsc * 1000 / n->tsc_khz);
	serial_kv("pps", tsc ? c.good * n->tsc_khz * 1000 / tsc : 0);
	serial_kv("kicks", n->rx.kicks);
	if (n->irq) {
		serial_kv("irqs", irq_rx_count);
		serial_kv("timer_irqs", irq_timer_count);
		serial_kv("halts", n->halts);
	}
	serial_puts("\n");
}
