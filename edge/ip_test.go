package edge_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/jetway-gw/jetway/edge"
)

// IP rules and forwarded addresses: spoofed X-Forwarded-For from an
// untrusted peer is ignored everywhere; from a trusted proxy the
// right-most untrusted entry is the client, for rules, limits and the
// backend.
func TestIPRulesAndTrustedProxies(t *testing.T) {
	var lastXFF atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastXFF.Store(r.Header.Get("X-Forwarded-For"))
		io.WriteString(w, "ok")
	}))
	defer backend.Close()

	// Untrusted: the test client (127.0.0.1) is the client, whatever it claims.
	g := newGateway(t)
	g.Publish(`{"name":"ipd","pool":"p","route":{"path":"/ipd"},"backend":{"type":"http","url":"` + backend.URL + `"},"ip_rules":{"deny":["127.0.0.1"]}}`)
	g.Publish(`{"name":"ipa","pool":"p","route":{"path":"/ipa"},"backend":{"type":"http","url":"` + backend.URL + `"},"ip_rules":{"allow":["6.6.6.0/24"]}}`)
	if r := g.Do("GET", "/ipd", nil, "X-Forwarded-For", "8.8.8.8"); r.Status != 403 || r.Code != "FORBIDDEN" {
		t.Errorf("denied peer with a spoofed XFF: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/ipa", nil, "X-Forwarded-For", "6.6.6.6"); r.Status != 403 {
		t.Errorf("spoofed XFF into an allow list: %d %s", r.Status, r.Body)
	}

	// Trusted: 127.0.0.1 is a proxy; the client is in X-Forwarded-For.
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	g2 := newGatewayWith(t, edge.Options{TrustedProxies: trusted, IPRules: &edge.IPRules{Deny: []netip.Prefix{netip.MustParsePrefix("9.9.9.9/32")}}})
	g2.Publish(`{"name":"ipa","pool":"p","route":{"path":"/ipa"},"backend":{"type":"http","url":"` + backend.URL + `"},"ip_rules":{"allow":["6.6.6.0/24"]},
		"rate_limits":[{"key":["ip"],"limit":1,"window":"1m"}]}`)
	if r := g2.Do("GET", "/ipa", nil, "X-Forwarded-For", "6.6.6.6"); r.Status != 200 || lastXFF.Load() != "6.6.6.6, 127.0.0.1" {
		t.Errorf("client behind a trusted proxy: %d %s, backend saw XFF %v", r.Status, r.Body, lastXFF.Load())
	}
	// The rate limit counts the forwarded client, not the proxy.
	if r := g2.Do("GET", "/ipa", nil, "X-Forwarded-For", "6.6.6.6"); r.Status != 429 {
		t.Errorf("second call of 6.6.6.6: %d", r.Status)
	}
	if r := g2.Do("GET", "/ipa", nil, "X-Forwarded-For", "6.6.6.7"); r.Status != 200 {
		t.Errorf("another client behind the same proxy: %d %s", r.Status, r.Body)
	}
	// The edge-wide deny list.
	if r := g2.Do("GET", "/ipa", nil, "X-Forwarded-For", "9.9.9.9"); r.Status != 403 || r.Code != "FORBIDDEN" {
		t.Errorf("edge-wide deny: %d %s", r.Status, r.Body)
	}
	// A client can't hide behind a forged left-most entry: the right-most
	// untrusted one counts.
	if r := g2.Do("GET", "/ipa", nil, "X-Forwarded-For", "6.6.6.8, 1.2.3.4"); r.Status != 403 {
		t.Errorf("forged chain: %d %s", r.Status, r.Body)
	}
}
