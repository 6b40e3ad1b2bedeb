package edge_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/jetway-gw/jetway/edge"
)

// Forwarding headers and underscore spellings of any header never reach a
// backend from a caller: the edge sets the forwarding headers itself, from
// the client address it computed with the trusted-proxy rules.
func TestCallerForwardingHeadersDropped(t *testing.T) {
	seen := make(chan http.Header, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer backend.Close()
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		xff     string // X-Forwarded-For the caller sends
		realIP  string // X-Real-Ip the backend must get
		wantXFF string
	}{
		{"untrusted peer", nil, "6.6.6.6", "127.0.0.1", "127.0.0.1"},
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "203.0.113.7", "203.0.113.7", "203.0.113.7, 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGatewayWith(t, edge.Options{TrustedProxies: tc.trusted})
			g.Publish(`{"name":"fw","pool":"p","route":{"path":"/fw"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
			r := g.Do("GET", "/fw", nil,
				"X-Forwarded-For", tc.xff,
				"X-Real-Ip", "6.6.6.6",
				"Forwarded", "for=6.6.6.6;proto=https",
				"X-Forwarded-Port", "443",
				"X-Forwarded-Prefix", "/admin",
				"True-Client-Ip", "6.6.6.6",
				"X-Client-Ip", "6.6.6.6",
				"X-Original-Url", "/admin/x",
				"X-Rewrite-Url", "/admin/x",
				"X_Forwarded_For", "6.6.6.6",
				"X_Real_Ip", "6.6.6.6",
				"X_Jetway_App", "forged",
				"Jetway_App", "forged",
				"X_Custom", "dropped too",
				"X-Custom", "kept",
			)
			if r.Status != 200 {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			h := <-seen
			for k := range h {
				switch http.CanonicalHeaderKey(k) {
				case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
					"X-Custom", "X-Request-Id", "X-Request-Timeout", "User-Agent", "Accept-Encoding":
				default:
					t.Errorf("backend got %s: %q", k, h[k])
				}
			}
			if got := h.Get("X-Forwarded-For"); got != tc.wantXFF {
				t.Errorf("X-Forwarded-For %q, want %q", got, tc.wantXFF)
			}
			if got := h.Get("X-Real-Ip"); got != tc.realIP || net.ParseIP(got) == nil {
				t.Errorf("X-Real-Ip %q, want %q", got, tc.realIP)
			}
			if h.Get("X-Custom") != "kept" || h.Get("X-Forwarded-Proto") != "http" {
				t.Errorf("headers %v", h)
			}
		})
	}
}
