/* The virtio-pci modern transport (virtio 1.2, 4.1.4) and split virtqueues
 * (2.7) from the driver's side. Rings and buffers live in the guest's own
 * .bss; guest-virtual equals guest-physical because both entries identity-map
 * memory. The driver polls the used rings; with irq=1 the rx queue also has
 * an MSI-X vector (irq.c) and the rx mode halts between interrupts. */
#include "bench.h"

#define VIRTIO_VENDOR 0x1af4
#define PCI_STATUS 0x06
#define PCI_STATUS_CAPS 0x10
#define PCI_CAP_PTR 0x34
#define PCI_CAP_VENDOR 0x09

enum { CAP_COMMON = 1, CAP_NOTIFY = 2, CAP_ISR = 3, CAP_DEVICE = 4 };

/* Common configuration layout (virtio 1.2, 4.1.4.3). */
enum {
	CC_DFSELECT = 0, CC_DF = 4, CC_GFSELECT = 8, CC_GF = 12,
	CC_MSIX = 16, CC_NUMQ = 18, CC_STATUS = 20, CC_GEN = 21,
	CC_QSELECT = 22, CC_QSIZE = 24, CC_QMSIX = 26, CC_QENABLE = 28,
	CC_QNOTIFYOFF = 30, CC_QDESC = 32, CC_QAVAIL = 40, CC_QUSED = 48,
};

enum { S_ACK = 1, S_DRIVER = 2, S_DRIVER_OK = 4, S_FEATURES_OK = 8, S_NEEDS_RESET = 0x40, S_FAILED = 0x80 };

#define AVAIL_F_NO_INTERRUPT 1
#define USED_F_NO_NOTIFY 1
#define PAGE 4096ul

/* Rings and buffers for two queues of up to 256 entries of 2 KiB. */
static u8 arena[2 * (3 * PAGE + VQ_MAX * 2048)] __attribute__((aligned(4096)));
static u64 arena_used;

static void *arena_alloc(u64 size)
{
	u64 at = (arena_used + PAGE - 1) & ~(PAGE - 1);
	if (at + size > sizeof(arena))
		return NULL;
	arena_used = at + size;
	return arena + at;
}

static volatile u8 *cap_pointer(const struct pci_dev *d, u16 cap, u32 *length)
{
	u8 bar = pci_read8(d, (u16)(cap + 4));
	u32 offset = pci_read32(d, (u16)(cap + 8));
	*length = pci_read32(d, (u16)(cap + 12));
	u64 base = pci_bar_address(d, bar);
	if (!base || paging_map_identity(base + offset, *length) < 0)
		return NULL;
	return (volatile u8 *)(base + offset);
}

static int find_caps(struct virtio_dev *v)
{
	const struct pci_dev *d = &v->pci;
	if (!(pci_read16(d, PCI_STATUS) & PCI_STATUS_CAPS))
		return -1;
	u16 cap = pci_read8(d, PCI_CAP_PTR) & 0xfc;
	for (int n = 0; cap && n < 48; n++) { /* bounded: a looping list */
		if (pci_read8(d, cap) == PCI_CAP_VENDOR) {
			u8 type = pci_read8(d, (u16)(cap + 3));
			u32 len;
			/* The spec: use the first capability of each type. */
			if (type == CAP_COMMON && !v->common)
				v->common = cap_pointer(d, cap, &len);
			else if (type == CAP_NOTIFY && !v->notify) {
				v->notify = cap_pointer(d, cap, &len);
				v->notify_mult = pci_read32(d, (u16)(cap + 16));
			} else if (type == CAP_ISR && !v->isr)
				v->isr = cap_pointer(d, cap, &len);
			else if (type == CAP_DEVICE && !v->devcfg)
				v->devcfg = cap_pointer(d, cap, &len);
		}
		cap = pci_read8(d, (u16)(cap + 1)) & 0xfc;
	}
	return v->common && v->notify && v->devcfg ? 0 : -1;
}

u8 virtio_status(struct virtio_dev *v) { return mmio_r8(v->common + CC_STATUS); }

static void set_status(struct virtio_dev *v, u8 bits)
{
	mmio_w8(v->common + CC_STATUS, (u8)(virtio_status(v) | bits));
}

void virtio_reset(struct virtio_dev *v)
{
	mmio_w8(v->common + CC_STATUS, 0);
	for (int i = 0; i < 1000000 && virtio_status(v); i++)
		cpu_relax();
}

static u64 device_features(struct virtio_dev *v)
{
	mmio_w32(v->common + CC_DFSELECT, 0);
	u64 lo = mmio_r32(v->common + CC_DF);
	mmio_w32(v->common + CC_DFSELECT, 1);
	return lo | (u64)mmio_r32(v->common + CC_DF) << 32;
}

int virtio_init(struct virtio_dev *v, const struct pci_dev *pci, u64 wanted)
{
	memset(v, 0, sizeof(*v));
	v->pci = *pci;
	if (find_caps(v) < 0)
		return -1;
	pci_enable_memory_and_dma(pci);
	virtio_reset(v);
	set_status(v, S_ACK);
	set_status(v, S_DRIVER);
	v->features = device_features(v) & wanted;
	if (!(v->features & VIRTIO_F_VERSION_1))
		return -1;
	mmio_w32(v->common + CC_GFSELECT, 0);
	mmio_w32(v->common + CC_GF, (u32)v->features);
	mmio_w32(v->common + CC_GFSELECT, 1);
	mmio_w32(v->common + CC_GF, (u32)(v->features >> 32));
	set_status(v, S_FEATURES_OK);
	if (!(virtio_status(v) & S_FEATURES_OK))
		return -1;
	mmio_w16(v->common + CC_MSIX, NO_VECTOR);
	return 0;
}

static void write_addr(struct virtio_dev *v, u32 off, const volatile void *p)
{
	u64 a = (u64)p;
	mmio_w32(v->common + off, (u32)a);
	mmio_w32(v->common + off + 4, (u32)(a >> 32));
}

int virtio_queue_setup(struct virtio_dev *v, struct virtqueue *q, u16 index, u32 buf_size, u16 msix)
{
	memset(q, 0, sizeof(*q));
	mmio_w16(v->common + CC_QSELECT, index);
	u16 max = mmio_r16(v->common + CC_QSIZE);
	if (!max)
		return -1;
	q->index = index;
	q->size = max < VQ_MAX ? max : VQ_MAX;
	if (q->size & (q->size - 1))
		return -1; /* split rings need a power of two here */
	q->buf_size = buf_size;
	q->event_idx = (v->features & VIRTIO_RING_F_EVENT_IDX) != 0;
	q->desc = arena_alloc(16ul * q->size);
	q->avail = arena_alloc(6ul + 2ul * q->size);
	void *used = arena_alloc(6ul + 8ul * q->size);
	q->bufs = arena_alloc((u64)buf_size * q->size);
	if (!q->desc || !q->avail || !used || !q->bufs)
		return -1;
	q->used_hdr = used;
	q->used_ring = (volatile struct vq_used_elem *)((u8 *)used + 4);
	q->avail_event = (volatile u16 *)((u8 *)used + 4 + 8ul * q->size);
	/* Polling: ask for no interrupts. With EVENT_IDX, used_event stays 0,
	 * so the device signals once per 65536 buffers at most. */
	q->avail[0] = q->event_idx ? 0 : AVAIL_F_NO_INTERRUPT;
	for (u16 i = 0; i < q->size; i++)
		q->free_ids[i] = (u16)(q->size - 1 - i);
	q->nfree = q->size;

	mmio_w16(v->common + CC_QSIZE, q->size);
	mmio_w16(v->common + CC_QMSIX, msix);
	if (mmio_r16(v->common + CC_QMSIX) != msix)
		return -1; /* the device could not map the vector */
	write_addr(v, CC_QDESC, q->desc);
	write_addr(v, CC_QAVAIL, q->avail);
	write_addr(v, CC_QUSED, used);
	u16 notify_off = mmio_r16(v->common + CC_QNOTIFYOFF);
	q->notify = (volatile u16 *)(v->notify + (u64)notify_off * v->notify_mult);
	mmio_w16(v->common + CC_QENABLE, 1);
	return 0;
}

void virtio_driver_ok(struct virtio_dev *v) { set_status(v, S_DRIVER_OK); }

void vq_add(struct virtqueue *q, u16 id, u32 len, int writable)
{
	struct vq_desc *d = &q->desc[id];
	d->addr = (u64)vq_buf(q, id);
	d->len = len;
	d->flags = writable ? VQ_DESC_F_WRITE : 0;
	d->next = 0;
	q->avail[2 + (q->avail_idx & (q->size - 1))] = id;
	q->avail_idx++;
	barrier(); /* descriptor and ring entry before the index */
	q->avail[1] = q->avail_idx;
}

/* vring_need_event from the spec: did new_idx step past event since old? */
static int need_event(u16 event, u16 new_idx, u16 old)
{
	return (u16)(new_idx - event - 1) < (u16)(new_idx - old);
}

void vq_kick(struct virtqueue *q)
{
	u16 old = q->kicked_idx, now = q->avail_idx;
	if (old == now)
		return;
	full_fence(); /* the avail index store before the avail_event load */
	int notify = q->event_idx ? need_event(*q->avail_event, now, old)
				  : !(q->used_hdr[0] & USED_F_NO_NOTIFY);
	q->kicked_idx = now;
	if (notify) {
		mmio_w16(q->notify, q->index);
		q->kicks++;
	}
}

int vq_arm(struct virtqueue *q)
{
	if (q->event_idx)
		q->avail[2 + q->size] = q->last_used; /* used_event */
	else
		q->avail[0] = 0;
	full_fence(); /* the store above before the used index load */
	return q->used_hdr[1] != q->last_used;
}

void vq_disarm(struct virtqueue *q)
{
	if (!q->event_idx)
		q->avail[0] = AVAIL_F_NO_INTERRUPT;
}

int vq_get_used(struct virtqueue *q, u16 *id, u32 *len)
{
	if (q->used_hdr[1] == q->last_used)
		return 0;
	barrier(); /* the used index before the entry */
	volatile struct vq_used_elem *e = &q->used_ring[q->last_used & (q->size - 1)];
	u32 got = e->id;
	*len = e->len;
	q->last_used++;
	if (got >= q->size)
		bench_fail(EXIT_DEVICE_FAILED, "device returned a buffer id out of range");
	*id = (u16)got;
	return 1;
}
