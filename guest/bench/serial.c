/* Output on COM1 by polling the line status register: no interrupts. Each
 * port access is an exit to the VMM, so keep the output short. */
#include "bench.h"

#define COM1 0x3f8
#define LSR_THR_EMPTY 0x20

void serial_putc(char c)
{
	/* Bounded: a machine without a UART must not hang the guest. */
	for (int i = 0; i < 100000 && !(inb(COM1 + 5) & LSR_THR_EMPTY); i++)
		cpu_relax();
	outb(COM1, (u8)c);
}

void serial_puts(const char *s)
{
	while (*s) {
		if (*s == '\n')
			serial_putc('\r');
		serial_putc(*s++);
	}
}

void serial_u64(u64 v)
{
	char buf[21];
	int i = 20;
	buf[i] = 0;
	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	serial_puts(&buf[i]);
}

static void serial_key(const char *key)
{
	serial_putc(' ');
	serial_puts(key);
	serial_putc('=');
}

void serial_kv(const char *key, u64 v)
{
	serial_key(key);
	serial_u64(v);
}

void serial_kvs(const char *key, const char *v)
{
	serial_key(key);
	serial_puts(v);
}

static const char hexdigits[] = "0123456789abcdef";

void serial_kv_hex(const char *key, u64 v)
{
	serial_key(key);
	serial_puts("0x");
	int started = 0;
	for (int shift = 60; shift >= 0; shift -= 4) {
		int d = (int)((v >> shift) & 0xf);
		if (d || started || shift == 0) {
			serial_putc(hexdigits[d]);
			started = 1;
		}
	}
}

void serial_kv_mac(const char *key, const u8 mac[6])
{
	serial_key(key);
	for (int i = 0; i < 6; i++) {
		if (i)
			serial_putc(':');
		serial_putc(hexdigits[mac[i] >> 4]);
		serial_putc(hexdigits[mac[i] & 0xf]);
	}
}
