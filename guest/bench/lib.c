/* The little of libc the guest needs, and command-line parsing. */
#include "bench.h"

void *memset(void *dst, int c, unsigned long n)
{
	u8 *d = dst;
	while (n--)
		*d++ = (u8)c;
	return dst;
}

void *memcpy(void *dst, const void *src, unsigned long n)
{
	u8 *d = dst;
	const u8 *s = src;
	while (n--)
		*d++ = *s++;
	return dst;
}

int memcmp(const void *a, const void *b, unsigned long n)
{
	const u8 *x = a, *y = b;
	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}

unsigned long strlen(const char *s)
{
	unsigned long n = 0;
	while (s[n])
		n++;
	return n;
}

int str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* The command line is space-separated key=value words. */
int arg_str(const char *cmdline, const char *key, char *out, int outlen)
{
	unsigned long klen = strlen(key);
	const char *p = cmdline;
	while (p && *p) {
		while (*p == ' ')
			p++;
		if (!memcmp(p, key, klen) && p[klen] == '=') {
			const char *v = p + klen + 1;
			int i = 0;
			while (v[i] && v[i] != ' ' && i < outlen - 1) {
				out[i] = v[i];
				i++;
			}
			out[i] = 0;
			return 1;
		}
		while (*p && *p != ' ')
			p++;
	}
	return 0;
}

u64 arg_u64(const char *cmdline, const char *key, u64 def)
{
	char buf[24];
	u64 v = 0;
	if (!arg_str(cmdline, key, buf, sizeof(buf)) || !buf[0])
		return def;
	for (char *c = buf; *c; c++) {
		if (*c < '0' || *c > '9')
			return def;
		v = v * 10 + (u64)(*c - '0');
	}
	return v;
}

int parse_ip(const char *s, u8 ip[4])
{
	for (int i = 0; i < 4; i++) {
		u32 v = 0;
		int digits = 0;
		while (*s >= '0' && *s <= '9' && digits < 4)
			v = v * 10 + (u32)(*s++ - '0'), digits++;
		if (!digits || v > 255 || (i < 3 && *s++ != '.'))
			return 0;
		ip[i] = (u8)v;
	}
	return *s == 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int parse_mac(const char *s, u8 mac[6])
{
	for (int i = 0; i < 6; i++) {
		int hi = hexval(s[0]), lo = hexval(s[1]);
		if (hi < 0 || lo < 0)
			return 0;
		mac[i] = (u8)(hi << 4 | lo);
		s += 2;
		if (i < 5 && *s++ != ':')
			return 0;
	}
	return *s == 0;
}
