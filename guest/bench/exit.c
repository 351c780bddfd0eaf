/* The exit device: one byte to port 0x501. tinyvmm exits with that status;
 * QEMU's isa-debug-exit exits with (status << 1) | 1. */
#include "bench.h"

#define EXIT_PORT 0x501

void bench_exit(int status)
{
	serial_puts("BENCH exit");
	serial_kv("status", (u64)status);
	serial_puts("\n");
	outb(EXIT_PORT, (u8)status);
	/* No exit device: spin. At CPL3 there is no hlt; the host's timeout
	 * ends the run. */
	for (;;)
		cpu_relax();
}

void bench_fail(int status, const char *why)
{
	serial_puts("BENCH error msg=\"");
	serial_puts(why);
	serial_puts("\"\n");
	bench_exit(status);
}
