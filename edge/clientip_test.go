package edge

import (
	"github.com/jetway-gw/jetway/registry"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	trusted, err := registry.ParsePrefixes([]string{"10.0.0.0/8", "192.168.1.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		peer, xff, want, chain string
	}{
		{"203.0.113.9:5000", "", "203.0.113.9", "203.0.113.9"},
		{"203.0.113.9:5000", "1.2.3.4", "203.0.113.9", "203.0.113.9"}, // untrusted peer: XFF ignored
		{"10.0.0.5:5000", "1.2.3.4", "1.2.3.4", "1.2.3.4, 10.0.0.5"},
		{"10.0.0.5:5000", "6.6.6.6, 1.2.3.4, 10.9.9.9", "1.2.3.4", "6.6.6.6, 1.2.3.4, 10.9.9.9, 10.0.0.5"}, // right-most untrusted
		{"192.168.1.1:5000", "10.1.1.1", "10.1.1.1", "10.1.1.1, 192.168.1.1"},                              // all trusted: the left-most
		{"10.0.0.5:5000", "garbage, 1.2.3.4", "1.2.3.4", "garbage, 1.2.3.4, 10.0.0.5"},
		{"10.0.0.5:5000", "1.2.3.4, garbage", "10.0.0.5", "1.2.3.4, garbage, 10.0.0.5"},
		{"[::ffff:10.0.0.5]:5000", "2001:db8::1", "2001:db8::1", "2001:db8::1, 10.0.0.5"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		a, chain := clientAddr(r, trusted)
		if a.String() != tc.want || chain != tc.chain {
			t.Errorf("peer %s xff %q: got %s %q, want %s %q", tc.peer, tc.xff, a, chain, tc.want, tc.chain)
		}
	}
}

func TestIPRules(t *testing.T) {
	allow, _ := registry.ParsePrefixes([]string{"10.0.0.0/8"})
	deny, _ := registry.ParsePrefixes([]string{"10.6.6.6"})
	r := &IPRules{Allow: allow, Deny: deny}
	for ip, ok := range map[string]bool{"10.1.2.3": true, "10.6.6.6": false, "8.8.8.8": false} {
		if got := r.Allows(netip.MustParseAddr(ip)); got != ok {
			t.Errorf("%s: %v", ip, got)
		}
	}
	if _, err := registry.ParsePrefixes([]string{"10.0.0.0/33", "nope", "1.2.3.4"}); err == nil {
		t.Error("bad entries accepted")
	}
}

// FuzzClientAddr: whatever X-Forwarded-For says, an untrusted peer is
// the client, and a forwarded address is only believed from a trusted one.
func FuzzClientAddr(f *testing.F) {
	f.Add("203.0.113.9:5000", "1.2.3.4")
	f.Add("10.0.0.5:5000", "1.2.3.4, 10.0.0.7")
	f.Add("10.0.0.5:5000", "garbage, 10.1.1.1")
	f.Add("[::ffff:10.0.0.5]:80", "::ffff:1.2.3.4,,")
	f.Add("nonsense", "1.2.3.4")
	trusted, _ := registry.ParsePrefixes([]string{"10.0.0.0/8"})
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		addr, chain := clientAddr(r, trusted)
		p, err := netip.ParseAddrPort(peer)
		if err != nil {
			if addr.IsValid() {
				t.Fatalf("peer %q is no address, yet the client is %v", peer, addr)
			}
			return
		}
		if !contains(trusted, p.Addr().Unmap()) && (addr != p.Addr().Unmap() || chain != addr.String()) {
			t.Fatalf("untrusted peer %q with XFF %q: client %v chain %q", peer, xff, addr, chain)
		}
		if !addr.IsValid() {
			t.Fatalf("no client address for peer %q", peer)
		}
	})
}
