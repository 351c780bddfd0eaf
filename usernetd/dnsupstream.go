package usernetd

import (
	"context"
	"net"
)

// dnsUpstream is what the gateway's DNS service asks about names outside
// its own zone: the host's resolver (/etc/hosts, /etc/resolv.conf), as
// QEMU's user network asks it. A variable so that a test can point it at
// a DNS server of its own.
var dnsUpstream = ipv4Upstream{&net.Resolver{}}

// ipv4Upstream asks the host's resolver an A question as an A query
// alone. The DNS service answers A questions with IPv4 addresses only,
// but net.Resolver.LookupIPAddr asks for A and AAAA records both: one
// more socket and exchange with the host's DNS server per lookup, whose
// answer was thrown away.
type ipv4Upstream struct{ *net.Resolver }

func (u ipv4Upstream) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	ips, err := u.LookupIP(ctx, "ip4", host)
	if err != nil {
		return nil, err
	}
	addrs := make([]net.IPAddr, len(ips))
	for i, ip := range ips {
		addrs[i] = net.IPAddr{IP: ip}
	}
	return addrs, nil
}
