/* Bringing up the virtio-net device and the tx/rx helpers the modes share. */
#include "bench.h"

#define NET_HDR 12 /* struct virtio_net_hdr with num_buffers (VERSION_1) */
#define BUF_SIZE 2048

static const u16 net_device_ids[] = {0x1041, 0x1000}; /* modern, transitional */

static int arg_addr(const char *cmdline, const char *key, u8 *out, int is_mac)
{
	char buf[32];
	if (!arg_str(cmdline, key, buf, sizeof(buf)))
		return 1;
	return is_mac ? parse_mac(buf, out) : parse_ip(buf, out);
}

int net_setup(struct net *n, const char *cmdline)
{
	static const u8 ip[4] = {10, 0, 2, 15}, peer_ip[4] = {10, 0, 2, 1};
	/* A unicast MAC that nobody owns: the host's stack drops the flood
	 * early, the host's AF_PACKET sink still sees every frame. */
	static const u8 peer_mac[6] = {0x02, 0, 0, 0, 0, 0x02};
	static const u8 fallback_mac[6] = {0x52, 0x54, 0, 0x12, 0x34, 0x56};
	memcpy(n->ip, ip, 4);
	memcpy(n->peer_ip, peer_ip, 4);
	memcpy(n->peer_mac, peer_mac, 6);
	if (!arg_addr(cmdline, "ip", n->ip, 0) || !arg_addr(cmdline, "peer", n->peer_ip, 0) ||
	    !arg_addr(cmdline, "dmac", n->peer_mac, 1))
		bench_fail(EXIT_BAD_ARGS, "bad ip=, peer= or dmac= (use 10.0.2.15 and 02:00:00:00:00:02 forms)");
	n->irq = arg_u64(cmdline, "irq", 0) != 0;
	n->kick_every = (u32)arg_u64(cmdline, "kick", 1);
	if (!n->kick_every)
		n->kick_every = 1;

	struct pci_dev pci;
	if (!pci_find(0x1af4, net_device_ids, ARRAY_LEN(net_device_ids), &pci))
		bench_fail(EXIT_NO_DEVICE, "no virtio-net PCI device on bus 0");
	char bars[16];
	if (arg_str(cmdline, "bars", bars, sizeof(bars)) && str_eq(bars, "reassign"))
		pci_forget_bars(&pci);
	u64 wanted = VIRTIO_F_VERSION_1 | VIRTIO_NET_F_MAC;
	if (arg_u64(cmdline, "evidx", 1))
		wanted |= VIRTIO_RING_F_EVENT_IDX;
	if (virtio_init(&n->dev, &pci, wanted) < 0)
		bench_fail(EXIT_DEVICE_FAILED, "virtio-net init failed (modern virtio-pci with VERSION_1 needed)");
	u16 rx_vector = NO_VECTOR;
	if (n->irq) {
		irq_setup(n->tsc_khz);
		if (msix_setup(&pci) < 0)
			bench_fail(EXIT_DEVICE_FAILED, "irq=1: the device has no usable MSI-X table");
		rx_vector = 0;
	}
	if (virtio_queue_setup(&n->dev, &n->rx, 0, BUF_SIZE, rx_vector) < 0 ||
	    virtio_queue_setup(&n->dev, &n->tx, 1, BUF_SIZE, NO_VECTOR) < 0)
		bench_fail(EXIT_DEVICE_FAILED, "virtqueue setup failed");
	if (n->dev.features & VIRTIO_NET_F_MAC)
		for (int i = 0; i < 6; i++)
			n->mac[i] = mmio_r8(n->dev.devcfg + i);
	else
		memcpy(n->mac, fallback_mac, 6);
	virtio_driver_ok(&n->dev);

	while (n->rx.nfree) {
		u16 id = n->rx.free_ids[--n->rx.nfree];
		vq_add(&n->rx, id, BUF_SIZE, 1);
	}
	vq_kick(&n->rx);

	serial_puts("BENCH ready");
	serial_kv_mac("mac", n->mac);
	serial_kv("pci_dev", pci.dev);
	serial_kv_hex("common_cfg", (u64)n->dev.common);
	serial_kv_hex("features", n->dev.features);
	serial_kv("rxq", n->rx.size);
	serial_kv("txq", n->tx.size);
	serial_kv("kick", n->kick_every);
	serial_kv("irq", (u64)n->irq);
	serial_puts("\n");
	return 0;
}

void tx_reclaim(struct net *n)
{
	u16 id;
	u32 len;
	while (vq_get_used(&n->tx, &id, &len))
		n->tx.free_ids[n->tx.nfree++] = id;
}

u8 *tx_take(struct net *n, u16 *id)
{
	if (!n->tx.nfree)
		tx_reclaim(n);
	if (!n->tx.nfree)
		return NULL;
	*id = n->tx.free_ids[--n->tx.nfree];
	u8 *b = vq_buf(&n->tx, *id);
	memset(b, 0, NET_HDR);
	return b + NET_HDR;
}

void tx_put(struct net *n, u16 id, u32 frame_len)
{
	vq_add(&n->tx, id, NET_HDR + frame_len, 0);
}

int rx_next(struct net *n, u16 *id, u8 **frame, u32 *len)
{
	u32 used_len;
	if (!vq_get_used(&n->rx, id, &used_len))
		return 0;
	if (used_len > BUF_SIZE)
		bench_fail(EXIT_DEVICE_FAILED, "device wrote past an rx buffer");
	*frame = vq_buf(&n->rx, *id) + NET_HDR;
	*len = used_len > NET_HDR ? used_len - NET_HDR : 0;
	return 1;
}

void rx_repost(struct net *n, u16 id)
{
	vq_add(&n->rx, id, BUF_SIZE, 1);
}

int tx_flood_one(struct net *n, u32 size, u64 seq)
{
	u16 id;
	u8 *f = tx_take(n, &id);
	if (!f)
		return 0;
	frame_build(f, size, seq, n->mac, n->peer_mac, n->ip, n->peer_ip);
	tx_put(n, id, size);
	return 1;
}
