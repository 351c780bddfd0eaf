/* Answers to ARP requests and ICMP echo requests for the guest's address:
 * the peer's ping measures latency through the whole path. */
#include "bench.h"

#define ETH_ARP 0x0806
#define ETH_IP 0x0800

static u16 get16be(const u8 *p) { return (u16)(p[0] << 8 | p[1]); }

static u32 arp_reply(const u8 *f, u32 len, u8 *out, const u8 mac[6], const u8 ip[4])
{
	const u8 *a = f + 14;
	if (len < 42 || get16be(a) != 1 || get16be(a + 2) != ETH_IP || a[4] != 6 || a[5] != 4 ||
	    get16be(a + 6) != 1 || memcmp(a + 24, ip, 4))
		return 0;
	memcpy(out, f + 6, 6);
	memcpy(out + 6, mac, 6);
	out[12] = 0x08, out[13] = 0x06;
	u8 *r = out + 14;
	memcpy(r, a, 6);       /* htype, ptype, hlen, plen */
	r[6] = 0, r[7] = 2;    /* reply */
	memcpy(r + 8, mac, 6);
	memcpy(r + 14, ip, 4);
	memcpy(r + 18, a + 8, 10); /* the asker's mac and ip */
	memset(out + 42, 0, 18);   /* pad to the 60-byte minimum */
	return 60;
}

static u32 icmp_reply(const u8 *f, u32 len, u8 *out, const u8 mac[6], const u8 ip[4])
{
	const u8 *h = f + 14;
	if (len < 14 + 20 + 8 || (h[0] >> 4) != 4 || h[9] != 1 || memcmp(h + 16, ip, 4))
		return 0;
	u32 ihl = (u32)(h[0] & 0xf) * 4, total = get16be(h + 2);
	if (ihl < 20 || total < ihl + 8 || 14 + total > len || h[ihl] != 8 || total > FRAME_MAX - 14)
		return 0;
	memcpy(out, f + 6, 6);
	memcpy(out + 6, mac, 6);
	memcpy(out + 12, f + 12, 2 + total);
	u8 *r = out + 14;
	memcpy(r + 12, ip, 4);
	memcpy(r + 16, h + 12, 4);
	r[8] = 64;
	r[10] = r[11] = 0;
	u16 c = ip_checksum(r, ihl);
	r[10] = (u8)(c >> 8), r[11] = (u8)c;
	u8 *icmp = r + ihl;
	icmp[0] = 0; /* echo reply */
	icmp[2] = icmp[3] = 0;
	c = ip_checksum(icmp, total - ihl);
	icmp[2] = (u8)(c >> 8), icmp[3] = (u8)c;
	u32 n = 14 + total;
	if (n < 60) {
		memset(out + n, 0, 60 - n);
		n = 60;
	}
	return n;
}

u32 echo_reply(const u8 *f, u32 len, u8 *out, const u8 mac[6], const u8 ip[4], int *is_arp)
{
	if (len < 14)
		return 0;
	u16 type = get16be(f + 12);
	*is_arp = type == ETH_ARP;
	if (type == ETH_ARP)
		return arp_reply(f, len, out, mac, ip);
	if (type == ETH_IP)
		return icmp_reply(f, len, out, mac, ip);
	return 0;
}
