/* The benchmark frame: Ethernet + IPv4 + UDP, with a payload of
 *   magic u32 | seq u64 | checksum u32 | fill (byte i = (seq + i) & 0xff)
 * all little-endian. The checksum covers the payload with its own field
 * zeroed, so a peer detects corruption, and seq shows loss and reorder.
 * bench/frame.go builds and checks the same frames on the host. */
#include "bench.h"

static u32 rotl(u32 v, int n) { return v << n | v >> (32 - n); }

u32 payload_sum(const u8 *p, u32 n)
{
	u32 h = 0x811c9dc5u ^ n;
	u32 i = 0;
	for (; i + 4 <= n; i += 4) {
		u32 w = (u32)p[i] | (u32)p[i + 1] << 8 | (u32)p[i + 2] << 16 | (u32)p[i + 3] << 24;
		if (i == 12)
			w = 0; /* the checksum field itself */
		h = rotl(h, 5) ^ w;
		h *= 0x01000193u;
	}
	u32 w = 0;
	for (u32 k = 0; i + k < n; k++)
		w |= (u32)p[i + k] << (8 * k);
	return rotl(h, 5) ^ w;
}

u16 ip_checksum(const void *data, u32 len)
{
	const u8 *p = data;
	u32 sum = 0;
	for (u32 i = 0; i + 1 < len; i += 2)
		sum += (u32)p[i] << 8 | p[i + 1];
	if (len & 1)
		sum += (u32)p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (u16)~sum;
}

static void put16be(u8 *p, u16 v) { p[0] = (u8)(v >> 8), p[1] = (u8)v; }
static void put32le(u8 *p, u32 v) { for (int i = 0; i < 4; i++) p[i] = (u8)(v >> (8 * i)); }
static u32 get32le(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24; }

void frame_build(u8 *f, u32 len, u64 seq, const u8 src_mac[6], const u8 dst_mac[6],
		 const u8 src_ip[4], const u8 dst_ip[4])
{
	u32 payload = len - FRAME_HDR;
	memcpy(f, dst_mac, 6);
	memcpy(f + 6, src_mac, 6);
	put16be(f + 12, 0x0800);
	u8 *ip = f + 14;
	ip[0] = 0x45;
	ip[1] = 0;
	put16be(ip + 2, (u16)(20 + 8 + payload));
	put16be(ip + 4, (u16)seq);
	put16be(ip + 6, 0x4000); /* DF */
	ip[8] = 64;
	ip[9] = 17;
	put16be(ip + 10, 0);
	memcpy(ip + 12, src_ip, 4);
	memcpy(ip + 16, dst_ip, 4);
	put16be(ip + 10, ip_checksum(ip, 20));
	u8 *udp = ip + 20;
	put16be(udp, UDP_SRC_PORT);
	put16be(udp + 2, UDP_DST_PORT);
	put16be(udp + 4, (u16)(8 + payload));
	put16be(udp + 6, 0); /* no UDP checksum: the payload has its own */
	u8 *p = udp + 8;
	put32le(p, FRAME_MAGIC);
	put32le(p + 4, (u32)seq);
	put32le(p + 8, (u32)(seq >> 32));
	for (u32 i = PAYLOAD_HDR; i < payload; i++)
		p[i] = (u8)(seq + i);
	put32le(p + 12, payload_sum(p, payload));
}

/* udp_payload is the UDP payload of an IPv4 UDP frame (a 20-byte IP
 * header, as both senders write) at least min bytes long, or 0. */
static const u8 *udp_payload(const u8 *f, u32 len, u32 min)
{
	if (len < FRAME_HDR + min || f[12] != 0x08 || f[13] != 0x00 || f[14 + 9] != 17)
		return 0;
	return f + FRAME_HDR;
}

int frame_check(const u8 *f, u32 len, u64 *seq)
{
	const u8 *p = udp_payload(f, len, PAYLOAD_HDR);
	if (!p || get32le(p) != FRAME_MAGIC)
		return 0;
	u32 udp_len = (u32)f[14 + 24] << 8 | f[14 + 25];
	if (udp_len < 8 + PAYLOAD_HDR || FRAME_HDR - 8 + udp_len > len)
		return -1;
	u32 payload = udp_len - 8;
	*seq = (u64)get32le(p + 4) | (u64)get32le(p + 8) << 32;
	return payload_sum(p, payload) == get32le(p + 12) ? 1 : -1;
}

/* The kernel's packet generator (net/core/pktgen.c) starts a UDP payload
 * with struct pktgen_hdr: magic, then a sequence number, big-endian. */
#define PKTGEN_MAGIC 0xbe9be955u

static u32 get32be(const u8 *p) { return (u32)p[0] << 24 | (u32)p[1] << 16 | (u32)p[2] << 8 | p[3]; }

int pktgen_check(const u8 *f, u32 len, u64 *seq)
{
	const u8 *p = udp_payload(f, len, 8);
	if (!p || get32be(p) != PKTGEN_MAGIC)
		return 0;
	*seq = get32be(p + 4) - 1; /* pktgen numbers from 1, the bench from 0 */
	return 1;
}
