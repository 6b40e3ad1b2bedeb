package edge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// Routes with a host: the exact host wins over a wildcard, the longest
// wildcard over a shorter one, and any host over none; the host is
// compared without port, trailing dot or case; a path only a host-less
// route has is served on every host.
func TestHostRoutes(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"h.exact","pool":"p","route":{"path":"/h","host":"A.Example.com."},"backend":{"type":"mock","body":"exact"}}`)
	g.Publish(`{"name":"h.wild","pool":"p","route":{"path":"/h","host":"*.example.com"},"backend":{"type":"mock","body":"wild"}}`)
	g.Publish(`{"name":"h.deep","pool":"p","route":{"path":"/h","host":"*.eu.example.com"},"backend":{"type":"mock","body":"deep"}}`)
	g.Publish(`{"name":"h.none","pool":"p","route":{"path":"/h"},"backend":{"type":"mock","body":"none"}}`)
	g.Publish(`{"name":"h.only","pool":"p","route":{"path":"/only"},"backend":{"type":"mock","body":"only"}}`)
	// Paths only a wildcard has are served on its hosts, an exact host's
	// other routes and a deeper wildcard notwithstanding.
	g.Publish(`{"name":"h.wonly","pool":"p","route":{"path":"/wonly","host":"*.example.com"},"backend":{"type":"mock","body":"wonly"}}`)
	for _, c := range []struct {
		method, host, path string
		status             int
		body               string
	}{
		{"GET", "a.example.com", "/h", 200, "exact"},
		{"GET", "A.EXAMPLE.COM:8080", "/h", 200, "exact"},
		{"GET", "a.example.com.", "/h", 200, "exact"},
		{"GET", "b.example.com", "/h", 200, "wild"},
		{"GET", "x.b.example.com", "/h", 200, "wild"},
		{"GET", "x.eu.example.com", "/h", 200, "deep"},
		{"GET", "example.com", "/h", 200, "none"},
		{"GET", "other.test", "/h", 200, "none"},
		{"GET", "a.example.com", "/only", 200, "only"},
		{"GET", "a.example.com", "/wonly", 200, "wonly"},
		{"GET", "x.eu.example.com", "/wonly", 200, "wonly"},
		{"GET", "example.com", "/wonly", http.StatusNotFound, ""},
		{"POST", "a.example.com", "/h", http.StatusMethodNotAllowed, ""},
		{"GET", "a.example.com", "/nowhere", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(c.method, g.URL+c.path, nil)
		req.Host = c.host
		resp, err := jetwaytest.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.body != "" && string(b[:n]) != c.body) {
			t.Errorf("%s %s%s: %d %q, want %d %q", c.method, c.host, c.path, resp.StatusCode, b[:n], c.status, c.body)
		}
	}
}

// A host that is no host name is refused at publish, with its field.
func TestHostRouteRefused(t *testing.T) {
	g := jetwaytest.Start(t)
	for _, h := range []string{"api.example.com:443", "*.com", "10.0.0.1", "a_b.example.com"} {
		if _, err := g.Client.Put(t.Context(), []byte(`{"name":"h.bad","pool":"p","route":{"path":"/h","host":"`+h+`"},"backend":{"type":"mock"}}`)); err == nil {
			t.Errorf("host %q published", h)
		} else if !strings.Contains(err.Error(), "route.host") {
			t.Errorf("host %q: %v, want the route.host field named", h, err)
		}
	}
}
