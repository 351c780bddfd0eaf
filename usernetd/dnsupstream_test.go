package usernetd

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// memUpstream is a DNS server in memory: a resolver whose every dial is a
// net.Pipe served here (no packets, no host resolver). It answers A
// questions for any name but v6only's with addr, AAAA questions with
// nothing but for v6only, and notes the type of every question it was
// asked.
type memUpstream struct {
	addr net.IP
	mu   sync.Mutex
	asks []uint16
}

// v6only has an AAAA record and no A record at memUpstream.
const v6only = "v6only.example."

func (m *memUpstream) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, s := net.Pipe()
		go m.serve(s)
		return c, nil
	}}
}

// serve answers one query; a net.Conn that is not a PacketConn makes the
// resolver frame its messages as over TCP, as dns.Conn reads them.
func (m *memUpstream) serve(s net.Conn) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	conn := &dns.Conn{Conn: s}
	q, err := conn.ReadMsg()
	if err != nil || len(q.Question) != 1 {
		return
	}
	m.mu.Lock()
	m.asks = append(m.asks, q.Question[0].Qtype)
	m.mu.Unlock()
	r := new(dns.Msg)
	r.SetReply(q)
	r.Authoritative = true // an answer without records is then no lame referral
	hdr := dns.RR_Header{Name: q.Question[0].Name, Class: dns.ClassINET, Ttl: 60}
	switch v6 := q.Question[0].Name == v6only; {
	case q.Question[0].Qtype == dns.TypeA && !v6:
		hdr.Rrtype = dns.TypeA
		r.Answer = append(r.Answer, &dns.A{Hdr: hdr, A: m.addr})
	case q.Question[0].Qtype == dns.TypeAAAA && v6:
		hdr.Rrtype = dns.TypeAAAA
		r.Answer = append(r.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("2001:db8::1")})
	}
	conn.WriteMsg(r)
}

func (m *memUpstream) questions() []uint16 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.asks)
}

// An A question goes upstream as one A query, not as A and AAAA.
func TestIPv4UpstreamAsksForAOnly(t *testing.T) {
	m := &memUpstream{addr: net.IPv4(192, 0, 2, 7).To4()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs, err := ipv4Upstream{m.resolver()}.LookupIPAddr(ctx, "name.example.")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || !addrs[0].IP.Equal(m.addr) {
		t.Errorf("addresses %v, want %v", addrs, m.addr)
	}
	if q := m.questions(); !slices.Equal(q, []uint16{dns.TypeA}) {
		t.Errorf("asked upstream %v, want one A query (%d)", q, dns.TypeA)
	}
}

// A name with AAAA records alone exists: its A question gets no address
// and no error (the service answers it empty, not NXDOMAIN).
func TestIPv4UpstreamKeepsANameWithAAAAOnly(t *testing.T) {
	m := &memUpstream{addr: net.IPv4(192, 0, 2, 8).To4()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs, err := ipv4Upstream{m.resolver()}.LookupIPAddr(ctx, v6only)
	if err != nil || len(addrs) != 0 {
		t.Errorf("LookupIPAddr(%s): %v, %v; want no addresses and no error", v6only, addrs, err)
	}
	if q := m.questions(); !slices.Equal(q, []uint16{dns.TypeA, dns.TypeAAAA}) {
		t.Errorf("asked upstream %v, want A (%d) then AAAA (%d)", q, dns.TypeA, dns.TypeAAAA)
	}
}

// The gateway's DNS service asks dnsUpstream about a name outside its own
// zone, and the guest gets that answer.
func TestDNSAsksUpstreamOutsideItsZone(t *testing.T) {
	m := &memUpstream{addr: net.IPv4(192, 0, 2, 9).To4()}
	defer func(u ipv4Upstream) { dnsUpstream = u }(dnsUpstream)
	dnsUpstream = ipv4Upstream{m.resolver()}
	r := askGatewayDNS(t, open(t, Config{}), "outside.example.")
	if len(r.Answer) != 1 || !r.Answer[0].(*dns.A).A.Equal(m.addr) {
		t.Fatalf("answer: %v, want %v", r.Answer, m.addr)
	}
	if q := m.questions(); !slices.Equal(q, []uint16{dns.TypeA}) {
		t.Errorf("asked upstream %v, want one A query (%d)", q, dns.TypeA)
	}
}
