/* mode=tx: a UDP flood of size-byte frames for secs seconds or count frames,
 * with a notify decision every kick= frames (the seed 000 experiment). */
#include "bench.h"

#define DRAIN_MS 1000

void mode_tx(struct net *n, u32 size, u64 count, u64 secs)
{
	u64 limit = secs * 1000 * n->tsc_khz;
	u64 seq = 0, stalls = 0;
	u32 pending = 0;
	u64 start = rdtsc(), now = start;
	while (seq < count) {
		now = rdtsc();
		if (now - start >= limit)
			break;
		if (!tx_flood_one(n, size, seq)) {
			vq_kick(&n->tx); /* ring full: the device must hear of it */
			pending = 0;
			stalls++;
			cpu_relax();
			continue;
		}
		seq++;
		if (++pending >= n->kick_every) {
			vq_kick(&n->tx);
			pending = 0;
		}
	}
	vq_kick(&n->tx);
	u64 end = rdtsc();
	/* Wait (bounded) for the device to finish with every frame. */
	u64 drain_limit = DRAIN_MS * n->tsc_khz;
	while (n->tx.nfree < n->tx.size && rdtsc() - end < drain_limit) {
		tx_reclaim(n);
		cpu_relax();
	}
	u64 tsc = end - start;
	serial_puts("BENCH result mode=tx");
	serial_kv("size", size);
	serial_kv("frames", seq);
	serial_kv("completed", seq - (u64)(n->tx.size - n->tx.nfree));
	serial_kv("bytes", seq * size);
	serial_kv("tsc", tsc);
	serial_kv("usec", tsc * 1000 / n->tsc_khz);
	serial_kv("pps", tsc ? seq * n->tsc_khz * 1000 / tsc : 0);
	serial_kv("kicks", n->tx.kicks);
	serial_kv("stalls", stalls);
	serial_puts("\n");
}
