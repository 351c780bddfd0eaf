#!/usr/bin/env bash
# A network namespace with a tap for a tinyvmm guest, so that nothing touches the
# machine's own namespace. Host side of the tap: 10.0.2.1/24; the guest is 10.0.2.15.
#
#   scripts/netns.sh up   [NS] [TAP]          create NS with TAP inside (idempotent)
#   scripts/netns.sh down [NS]                remove NS and everything in it
#   scripts/netns.sh exec [NS] -- CMD...      run CMD inside NS
#   scripts/netns.sh run  [NS] [TAP] -- CMD.. up, run CMD inside, then down (also on Ctrl-C)
set -euo pipefail

cmd=${1:-}; shift || true
ns=${1:-tinyvmm0}; [ $# -gt 0 ] && shift
host_addr=10.0.2.1/24

up() { # NS TAP
	local ns=$1 tap=$2
	ip netns list | grep -qw "$ns" || ip netns add "$ns"
	ip -n "$ns" link set lo up
	if ! ip -n "$ns" link show "$tap" >/dev/null 2>&1; then
		ip -n "$ns" tuntap add dev "$tap" mode tap vnet_hdr
		ip -n "$ns" addr add "$host_addr" dev "$tap"
	fi
	ip -n "$ns" link set "$tap" up
	echo "namespace $ns: $tap at $host_addr; guest address 10.0.2.15 (ip netns exec $ns ping 10.0.2.15)"
}

down() { # NS
	ip netns list | grep -qw "$1" && ip netns del "$1"
	return 0
}

case "$cmd" in
up)
	up "$ns" "${1:-tap0}" ;;
down)
	down "$ns" ;;
exec)
	[ "${1:-}" = "--" ] && shift
	exec ip netns exec "$ns" "$@" ;;
run)
	tap=${1:-tap0}; shift || true
	[ "${1:-}" = "--" ] && shift
	up "$ns" "$tap" >&2
	trap 'down "$ns"' EXIT
	trap 'exit 130' INT TERM
	ip netns exec "$ns" "$@" ;;
*)
	sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
