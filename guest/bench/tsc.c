/* The TSC rate, to turn rdtsc deltas into time. The host passes its own
 * measurement (tsc_khz=); without it the guest times the PIT. */
#include "bench.h"

#define PIT_HZ 1193182
#define PIT_CH2 0x42
#define PIT_CMD 0x43
#define PIT_GATE 0x61
#define CALIBRATE_MS 50
#define GUESS_KHZ 2000000

static u64 tsc_khz_from_pit(void)
{
	u32 count = PIT_HZ / (1000 / CALIBRATE_MS);
	u8 gate = inb(PIT_GATE);
	outb(PIT_GATE, (u8)((gate & ~0x02) | 0x01)); /* gate on, speaker off */
	outb(PIT_CMD, 0xb0);                          /* ch2, lo/hi, mode 0 */
	outb(PIT_CH2, (u8)count);
	outb(PIT_CH2, (u8)(count >> 8));
	u64 t0 = rdtsc();
	/* Bounded: without a PIT the output bit may never change. */
	for (u32 i = 0; i < 20000000 && !(inb(PIT_GATE) & 0x20); i++)
		;
	u64 khz = (rdtsc() - t0) / CALIBRATE_MS;
	outb(PIT_GATE, gate);
	return khz;
}

u64 tsc_setup(const char *cmdline, const char **source)
{
	u64 khz = arg_u64(cmdline, "tsc_khz", 0);
	if (khz) {
		*source = "host";
		return khz;
	}
	khz = tsc_khz_from_pit();
	if (khz > 200000 && khz < 10000000) {
		*source = "pit";
		return khz;
	}
	*source = "guess";
	return GUESS_KHZ;
}
