/* mode=echo: answer ARP and ICMP echo for ip= for secs seconds; with
 * mode=echo+tx, flood tx at the same time (the seed 002 setup: the replies
 * queue behind the flood in the same tx ring). mode=echo with irq=1 halts
 * while nothing comes, so each request is an interrupt that wakes it. */
#include "bench.h"

#define RX_BATCH 64
#define FLOOD_BURST 32
#define REPLY_RESERVE 8 /* tx buffers the flood leaves for replies */

struct echo_counts {
	u64 arp, icmp, dropped, flood;
};

static void answer(struct net *n, const u8 *f, u32 len, struct echo_counts *c)
{
	u16 id;
	u8 *out = tx_take(n, &id);
	if (!out) {
		c->dropped++;
		return;
	}
	int is_arp;
	u32 r = echo_reply(f, len, out, n->mac, n->ip, &is_arp);
	if (!r) {
		n->tx.free_ids[n->tx.nfree++] = id;
		return;
	}
	tx_put(n, id, r);
	vq_kick(&n->tx);
	if (is_arp)
		c->arp++;
	else
		c->icmp++;
}

void mode_echo(struct net *n, int flood, u32 size, u64 secs)
{
	struct echo_counts c = {0};
	u64 limit = secs * 1000 * n->tsc_khz;
	u64 start = rdtsc();
	u32 pending = 0;
	while (rdtsc() - start < limit) {
		int got = 0;
		u16 id;
		u8 *f;
		u32 len;
		while (got < RX_BATCH && rx_next(n, &id, &f, &len)) {
			answer(n, f, len, &c);
			rx_repost(n, id);
			got++;
		}
		if (got)
			vq_kick(&n->rx);
		tx_reclaim(n);
		for (int i = 0; flood && i < FLOOD_BURST && n->tx.nfree > REPLY_RESERVE; i++) {
			tx_flood_one(n, size, c.flood++);
			if (++pending >= n->kick_every) {
				vq_kick(&n->tx);
				pending = 0;
			}
		}
		if (flood && n->tx.nfree <= REPLY_RESERVE) {
			vq_kick(&n->tx);
			pending = 0;
		}
		if (got || flood)
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
	vq_kick(&n->tx);
	u64 tsc = rdtsc() - start;
	serial_puts("BENCH result mode=echo");
	serial_kv("flood", (u64)flood);
	serial_kv("arp", c.arp);
	serial_kv("icmp", c.icmp);
	serial_kv("dropped", c.dropped);
	serial_kv("frames", c.flood);
	serial_kv("tsc", tsc);
	serial_kv("usec", tsc * 1000 / n->tsc_khz);
	serial_kv("pps", tsc ? c.flood * n->tsc_khz * 1000 / tsc : 0);
	serial_kv("kicks", n->tx.kicks);
	if (n->irq) {
		serial_kv("irqs", irq_rx_count);
		serial_kv("timer_irqs", irq_timer_count);
		serial_kv("halts", n->halts);
	}
	serial_puts("\n");
}
