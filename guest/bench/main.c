/* The bench guest's C entry, shared by the user-mode start (entry.S) and the
 * PVH boot (pvh.S). The command line picks the mode:
 *   mode=tx size=64 count=N secs=S kick=N   a UDP flood
 *   mode=rx secs=S [irq=1]                  count the peer's frames (irq=1:
 *                                           halt between rx interrupts)
 *   mode=echo secs=S [irq=1] / mode=echo+tx size=64 answer ARP and ping (and flood)
 * and ip=, peer=, dmac=, evidx=0, tsc_khz=, bars=reassign adjust it; cpl3=1 on a PVH boot
 * enters through the user-mode start instead (usermode.c). Results are BENCH
 * lines on the serial port; the status goes to the exit device. */
#include "bench.h"

/* How long the guest stays after its result line (see main). */
#define LINGER_MS 200

#define CMDLINE_MAX 512
#define PVH_MAGIC 0x336ec578u

/* In .data, not .bss: entry.S fills it before it zeroes .bss. */
char cmdline_buf[CMDLINE_MAX] __attribute__((section(".data")));
static struct net net;

void bench_main(const char *cmdline, int at_cpl0)
{
	running_at_cpl0 = at_cpl0;
	serial_puts("BENCH start");
	serial_kvs("entry", at_cpl0 ? "pvh" : "user");
	serial_puts(" cmdline=\"");
	serial_puts(cmdline);
	serial_puts("\"\n");

	char mode[16];
	if (!arg_str(cmdline, "mode", mode, sizeof(mode)))
		bench_fail(EXIT_BAD_ARGS, "no mode= (use mode=tx, rx, echo or echo+tx)");
	u32 size = (u32)arg_u64(cmdline, "size", 64);
	if (size < FRAME_MIN || size > FRAME_MAX)
		bench_fail(EXIT_BAD_ARGS, "size= must be 60..1514 (an Ethernet frame without FCS)");
	u64 secs = arg_u64(cmdline, "secs", 2);
	u64 count = arg_u64(cmdline, "count", ~0ul);
	const char *source;
	net.tsc_khz = tsc_setup(cmdline, &source);
	serial_puts("BENCH tsc");
	serial_kv("khz", net.tsc_khz);
	serial_kvs("source", source);
	serial_puts("\n");

	int is_tx = str_eq(mode, "tx"), is_rx = str_eq(mode, "rx");
	int is_echo = str_eq(mode, "echo"), is_echo_tx = str_eq(mode, "echo+tx");
	if (!is_tx && !is_rx && !is_echo && !is_echo_tx)
		bench_fail(EXIT_BAD_ARGS, "unknown mode= (use mode=tx, rx, echo or echo+tx)");

	if (arg_u64(cmdline, "irq", 0) && !is_rx && !is_echo)
		bench_fail(EXIT_BAD_ARGS, "irq=1 is for mode=rx and mode=echo (the flooding modes poll)");
	net_setup(&net, cmdline);
	if (is_tx)
		mode_tx(&net, size, count, secs);
	else if (is_rx)
		mode_rx(&net, secs);
	else
		mode_echo(&net, is_echo_tx, size, secs);

	/* The host reads the VMM's threads' counters when it sees the result
	 * line; a VMM exits with its guest, and its threads (vCPUs,
	 * vhost-net's worker) with it: stay a moment so that they are there. */
	u64 t0 = rdtsc();
	while (rdtsc() - t0 < LINGER_MS * net.tsc_khz)
		cpu_relax();

	u8 status = virtio_status(&net.dev);
	if (status & 0xc0) /* NEEDS_RESET or FAILED */
		bench_fail(EXIT_DEVICE_FAILED, "device reports NEEDS_RESET or FAILED");
	virtio_reset(&net.dev);
	bench_exit(EXIT_OK);
}

/* pvh_main runs at CPL0 in long mode, called by pvh.S with the physical
 * address of the hvm_start_info that the loader left in ebx. */
void pvh_main(const u32 *start_info)
{
	const char *src = "";
	if (start_info && start_info[0] == PVH_MAGIC) {
		u64 paddr = *(const u64 *)(start_info + 6); /* cmdline_paddr at offset 24 */
		if (paddr && paddr < (4ul << 30))
			src = (const char *)paddr;
	}
	int i = 0;
	for (; src[i] && i < CMDLINE_MAX - 1; i++)
		cmdline_buf[i] = src[i];
	cmdline_buf[i] = 0;
	if (arg_u64(cmdline_buf, "cpl3", 0))
		enter_user_mode(cmdline_buf);
	bench_main(cmdline_buf, 1);
}
