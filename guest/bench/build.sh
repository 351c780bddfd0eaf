#!/bin/bash
# Builds the bench guest, out/guest/bench.elf, with the machine's gcc:
# freestanding, static, no SSE (neither entry enables it), linked at 0x400000.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/out/guest
obj=$out/bench-obj
mkdir -p "$obj"

CC=${CC:-gcc}
CFLAGS=(-O2 -g -std=gnu11 -Wall -Wextra -Werror -ffreestanding -fno-builtin -nostdlib -static
	-fno-pic -fno-pie -fno-stack-protector -fno-asynchronous-unwind-tables
	-mgeneral-regs-only -mno-red-zone -mcmodel=small)

objs=()
for src in "$here"/*.c "$here"/*.S; do
	o=$obj/$(basename "$src").o
	"$CC" "${CFLAGS[@]}" -c "$src" -o "$o"
	objs+=("$o")
done
"$CC" "${CFLAGS[@]}" -no-pie -Wl,-T,"$here/link.ld" -Wl,-z,max-page-size=4096 -Wl,--build-id=none \
	-o "$out/bench.elf" "${objs[@]}" -lgcc
echo "built $out/bench.elf"
