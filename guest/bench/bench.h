/* Shared declarations of the bench guest: a freestanding, poll-mode
 * virtio-net driver that runs either at CPL3 started directly by tinyvmm
 * (entry.S) or at CPL0 after a PVH boot (pvh.S). It never takes an
 * exception, and enables interrupts only with irq=1 (irq.c, CPL0 only). */
#ifndef BENCH_H
#define BENCH_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;
typedef long i64;

#define NULL ((void *)0)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Exit statuses written to the exit device (port 0x501). Under tinyvmm's
 * user-mode start, 1..31 mean "exception vector N" (its stubs write N), so
 * the guest's own failures use 64 and up. */
enum {
	EXIT_OK = 0,
	EXIT_BAD_ARGS = 64,
	EXIT_NO_DEVICE = 65,
	EXIT_DEVICE_FAILED = 66,
	EXIT_CPL3_FAULT = 67, /* cpl3=1: an exception at CPL3 (usermode.c) */
};

/* ---- port I/O, MMIO and CPU helpers (all legal at CPL3 with IOPL 3) ---- */

static inline void outb(u16 port, u8 v) { __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(u16 port, u16 v) { __asm__ volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(u16 port, u32 v) { __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }
static inline u8 inb(u16 port) { u8 v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline u16 inw(u16 port) { u16 v; __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline u32 inl(u16 port) { u32 v; __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port)); return v; }

static inline u64 rdtsc(void)
{
	u32 lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((u64)hi << 32) | lo;
}

/* The compiler must not move ring accesses across these; x86 keeps stores
 * in order and loads in order, so only store->load needs mfence. */
static inline void barrier(void) { __asm__ volatile("" : : : "memory"); }
static inline void full_fence(void) { __asm__ volatile("mfence" : : : "memory"); }
static inline void cpu_relax(void) { __asm__ volatile("pause" : : : "memory"); }

/* Plain movs of the given width: KVM must be able to decode every MMIO
 * access, and an ioeventfd write must be one store. */
static inline u8 mmio_r8(volatile void *p) { return *(volatile u8 *)p; }
static inline u16 mmio_r16(volatile void *p) { return *(volatile u16 *)p; }
static inline u32 mmio_r32(volatile void *p) { return *(volatile u32 *)p; }
static inline void mmio_w8(volatile void *p, u8 v) { *(volatile u8 *)p = v; }
static inline void mmio_w16(volatile void *p, u16 v) { *(volatile u16 *)p = v; }
static inline void mmio_w32(volatile void *p, u32 v) { *(volatile u32 *)p = v; }

/* ---- lib.c ---- */
void *memset(void *dst, int c, unsigned long n);
void *memcpy(void *dst, const void *src, unsigned long n);
int memcmp(const void *a, const void *b, unsigned long n);
unsigned long strlen(const char *s);
int str_eq(const char *a, const char *b);
/* arg_str copies the value of key=value from the command line; 0 if absent. */
int arg_str(const char *cmdline, const char *key, char *out, int outlen);
u64 arg_u64(const char *cmdline, const char *key, u64 def);
int parse_ip(const char *s, u8 ip[4]);
int parse_mac(const char *s, u8 mac[6]);
static inline u16 be16(u16 v) { return (u16)((v >> 8) | (v << 8)); }

/* ---- serial.c: COM1 output, polled ---- */
void serial_putc(char c);
void serial_puts(const char *s);
void serial_u64(u64 v);
void serial_kv(const char *key, u64 v);        /* " key=v" */
void serial_kvs(const char *key, const char *v); /* " key=v" */
void serial_kv_mac(const char *key, const u8 mac[6]);
void serial_kv_hex(const char *key, u64 v);

/* ---- exit.c ---- */
void bench_exit(int status) __attribute__((noreturn));
void bench_fail(int status, const char *why) __attribute__((noreturn));

/* ---- tsc.c ---- */
/* tsc_setup returns the TSC rate in kHz: from tsc_khz= on the command line,
 * else measured against the PIT, else a guess (source says which). */
u64 tsc_setup(const char *cmdline, const char **source);

/* ---- paging.c ---- */
extern int running_at_cpl0; /* set by the PVH entry */
/* paging_map_identity makes [addr, addr+len) reachable: a no-op below 4 GiB
 * (both entries map it), a page table update at CPL0, an error at CPL3. */
int paging_map_identity(u64 addr, u64 len);

/* ---- usermode.c: cpl3=1, the user-mode start under a PVH loader ---- */
void enter_user_mode(const char *cmdline) __attribute__((noreturn));

/* ---- pci.c: configuration mechanism #1 through 0xCF8/0xCFC ---- */
struct pci_dev {
	u8 bus, dev, fn;
};
int pci_find(u16 vendor, const u16 *devices, int ndevices, struct pci_dev *out);
u8 pci_read8(const struct pci_dev *d, u16 off);
u16 pci_read16(const struct pci_dev *d, u16 off);
u32 pci_read32(const struct pci_dev *d, u16 off);
void pci_write16(const struct pci_dev *d, u16 off, u16 v);
void pci_write32(const struct pci_dev *d, u16 off, u32 v);
/* pci_bar_address returns a memory BAR's address, assigning one in the
 * 0xC0000000 window when firmware left it at 0; 0 on error. */
u64 pci_bar_address(const struct pci_dev *d, int bar);
void pci_enable_memory_and_dma(const struct pci_dev *d);
/* pci_find_cap returns the offset of the first capability id, 0 if none. */
u8 pci_find_cap(const struct pci_dev *d, u8 id);
/* pci_forget_bars zeroes the memory BARs, as if no firmware had run
 * (bars=reassign, to test the assignment path under QEMU). */
void pci_forget_bars(const struct pci_dev *d);

/* ---- virtio.c: virtio-pci modern transport and split virtqueues ---- */
#define VIRTIO_F_VERSION_1 (1ul << 32)
#define VIRTIO_RING_F_EVENT_IDX (1ul << 29)
#define VIRTIO_NET_F_MAC (1ul << 5)

struct virtio_dev {
	struct pci_dev pci;
	volatile u8 *common, *notify, *isr, *devcfg;
	u32 notify_mult;
	u64 features; /* negotiated */
};

struct vq_desc {
	u64 addr;
	u32 len;
	u16 flags;
	u16 next;
};
struct vq_used_elem {
	u32 id;
	u32 len;
};

#define VQ_MAX 256
#define VQ_DESC_F_WRITE 2

struct virtqueue {
	u16 index, size;
	struct vq_desc *desc;
	volatile u16 *avail; /* flags, idx, ring[size], used_event */
	volatile u16 *used_hdr; /* flags, idx */
	volatile struct vq_used_elem *used_ring;
	volatile u16 *avail_event;
	volatile u16 *notify;
	int event_idx;
	u16 avail_idx;  /* next avail index we publish */
	u16 kicked_idx; /* avail index at the last notify decision */
	u16 last_used;  /* next used index we consume */
	u8 *bufs;
	u32 buf_size;
	u16 free_ids[VQ_MAX];
	u16 nfree;
	u64 kicks;
};

int virtio_init(struct virtio_dev *v, const struct pci_dev *pci, u64 wanted);
#define NO_VECTOR 0xffff
/* virtio_queue_setup sets queue index up with buffers of buf_size bytes
 * and MSI-X vector msix (NO_VECTOR: none; the driver polls). */
int virtio_queue_setup(struct virtio_dev *v, struct virtqueue *q, u16 index, u32 buf_size, u16 msix);
void virtio_driver_ok(struct virtio_dev *v);
u8 virtio_status(struct virtio_dev *v);
void virtio_reset(struct virtio_dev *v);
static inline u8 *vq_buf(struct virtqueue *q, u16 id) { return q->bufs + (u64)id * q->buf_size; }
/* vq_add makes buffer id (len bytes, device-writable or not) available. */
void vq_add(struct virtqueue *q, u16 id, u32 len, int writable);
/* vq_kick notifies the device if it asked for it (EVENT_IDX or flags). */
void vq_kick(struct virtqueue *q);
/* vq_get_used returns 1 and the next used buffer, 0 when none. */
int vq_get_used(struct virtqueue *q, u16 *id, u32 *len);
/* vq_arm asks for an interrupt at the next used buffer and returns 1 if
 * one came meanwhile (do not halt then); vq_disarm asks for none while the
 * driver drains (a no-op with EVENT_IDX: used_event stays behind). */
int vq_arm(struct virtqueue *q);
void vq_disarm(struct virtqueue *q);

/* ---- IDT entries (usermode.c, irq.c) ---- */
struct idt_gate {
	u16 offset_low, selector;
	u8 ist, type_attr;
	u16 offset_mid;
	u32 offset_high, reserved;
} __attribute__((packed));

struct table_desc {
	u16 limit;
	u64 base;
} __attribute__((packed));

/* idt_gate: an interrupt gate (IF cleared on entry) to 64-bit code at
 * selector 0x08, DPL 0, the code segment of both GDTs. */
static inline struct idt_gate idt_gate(u64 handler)
{
	return (struct idt_gate){(u16)handler, 0x08, 0, 0x8e, (u16)(handler >> 16), (u32)(handler >> 32), 0};
}

/* ---- irq.c: irq=1, interrupts at CPL0 ---- */
#define IRQ_VECTOR_RX 0x40
#define IRQ_VECTOR_TIMER 0x41
extern volatile u64 irq_rx_count, irq_timer_count;
/* irq_setup loads an IDT, enables the local APIC and starts its 100 ms
 * periodic timer; it fails the run at CPL3. */
void irq_setup(u64 tsc_khz);
void irq_stop(void); /* the timer off, before the result line */
/* msix_setup points MSI-X table entry 0 at IRQ_VECTOR_RX and enables
 * MSI-X; -1 if the device has none. */
int msix_setup(const struct pci_dev *d);
/* irq_wait halts until an interrupt (rx or timer) has been taken. */
void irq_wait(void);

/* ---- frame.c: the benchmark frames (same format as bench/frame.go) ---- */
#define FRAME_MAGIC 0x424d5654u /* "TVMB" little-endian */
#define FRAME_HDR 42            /* ethernet 14 + IPv4 20 + UDP 8 */
#define FRAME_MIN 60
#define FRAME_MAX 1514
#define PAYLOAD_HDR 16          /* magic u32, seq u64, checksum u32 */
#define UDP_SRC_PORT 40000
#define UDP_DST_PORT 9
u32 payload_sum(const u8 *p, u32 n);
/* frame_build writes one frame of len bytes carrying seq. */
void frame_build(u8 *f, u32 len, u64 seq, const u8 src_mac[6], const u8 dst_mac[6],
		 const u8 src_ip[4], const u8 dst_ip[4]);
/* frame_check returns 1 for a good bench frame (seq set), 0 for another
 * kind of frame, -1 for a bench frame whose checksum or length is wrong. */
int frame_check(const u8 *f, u32 len, u64 *seq);
/* pktgen_check returns 1 for a frame of the kernel's pktgen (seq set: its
 * sequence number), 0 for any other; pktgen's payload has no checksum. */
int pktgen_check(const u8 *f, u32 len, u64 *seq);
u16 ip_checksum(const void *data, u32 len);

/* ---- echo.c: ARP and ICMP echo answers ---- */
/* echo_reply builds the answer to frame f in out; returns its length or 0. */
u32 echo_reply(const u8 *f, u32 len, u8 *out, const u8 mac[6], const u8 ip[4], int *is_arp);

/* ---- net.c: the modes ---- */
struct net {
	struct virtio_dev dev;
	struct virtqueue rx, tx;
	u8 mac[6], peer_mac[6], ip[4], peer_ip[4];
	u64 tsc_khz;
	u32 kick_every; /* consider a tx notify every this many frames */
	int irq;        /* irq=1: the rx queue interrupts; the guest halts when idle */
	u64 halts;      /* irq=1: times the guest halted with nothing to do */
};
int net_setup(struct net *n, const char *cmdline);
void tx_reclaim(struct net *n);
/* tx_take returns a free tx buffer's frame area (after the virtio-net
 * header) or NULL when the ring is full; tx_put makes it available. */
u8 *tx_take(struct net *n, u16 *id);
void tx_put(struct net *n, u16 id, u32 frame_len);
int tx_flood_one(struct net *n, u32 size, u64 seq);
/* rx_next returns the next received frame; rx_repost gives its buffer back. */
int rx_next(struct net *n, u16 *id, u8 **frame, u32 *len);
void rx_repost(struct net *n, u16 id);
void mode_tx(struct net *n, u32 size, u64 count, u64 secs);
void mode_rx(struct net *n, u64 secs);
void mode_echo(struct net *n, int flood, u32 size, u64 secs);

#endif
