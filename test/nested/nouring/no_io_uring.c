/* no_io_uring.so: LD_PRELOAD this into QEMU to keep it off io_uring. QEMU 7.2
 * sets up every io_uring it uses (its event loop's fdmon-io_uring, and the
 * block layer's aio=io_uring) with liburing's io_uring_queue_init, and falls
 * back to ppoll/epoll when that fails. This definition comes first in symbol
 * lookup, so QEMU sees io_uring_setup fail with ENOSYS, as on a kernel
 * without IO_URING; nothing else changes. Built with -nostdlib: no libc. */
#include <errno.h>

struct io_uring;

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	(void)entries;
	(void)ring;
	(void)flags;
	return -ENOSYS;
}
