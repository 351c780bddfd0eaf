package usernetd

import (
	"context"
	"errors"
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
// answer was thrown away. Only a name without A records is asked for
// AAAA too: one that has some exists, and its A question gets an empty
// answer, not the service's NXDOMAIN.
type ipv4Upstream struct{ *net.Resolver }

func (u ipv4Upstream) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	ips, err := u.LookupIP(ctx, "ip4", host)
	if dnsErr := (*net.DNSError)(nil); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		if v6, err := u.LookupIP(ctx, "ip6", host); err == nil && len(v6) > 0 {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	addrs := make([]net.IPAddr, len(ips))
	for i, ip := range ips {
		addrs[i] = net.IPAddr{IP: ip}
	}
	return addrs, nil
}
