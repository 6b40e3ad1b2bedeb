package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// A percent-encoded spelling of a protected path is the protected path: it
// is routed, authenticated and forwarded in its one canonical form, so a
// public catch-all cannot be used to reach what a key guards. Spellings
// that backends may read differently are refused.
func TestEncodedPathCannotBypassAuth(t *testing.T) {
	var seen atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.RequestURI)
		io.WriteString(w, r.RequestURI)
	}))
	defer backend.Close()
	g := newGateway(t)
	key, rec, _ := registry.NewAPIKey()
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "ops", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"admin.*"}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Apps["ops"] == nil {
			return fmt.Errorf("app not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"pub.all","pool":"p","route":{"path":"/pub/*"},"backend":{"type":"http","url":"` + backend.URL + `/public/{*}"}}`)
	g.Publish(`{"name":"admin.all","pool":"p","route":{"path":"/pub/admin/*"},"backend":{"type":"http","url":"` + backend.URL + `/admin/{*}"},
		"auth":{"methods":["key"]}}`)

	for _, tc := range []struct {
		path   string
		key    bool
		status int
		sees   string // the request URI the backend gets ("" for none)
	}{
		{"/pub/admin/x", false, 401, ""},
		{"/pub/%61dmin/x", false, 401, ""},
		{"/pub/%61%64%6D%69%6E/x", false, 401, ""},
		{"/pub/%61%64%6d%69%6e/x", false, 401, ""},
		{"/p%75b/admin/x", false, 401, ""},
		{"/%70%75%62/%61dmin/%78", false, 401, ""},
		{"/pub/%61dmin/x", true, 200, "/admin/x"},
		{"/p%75b/%61dmin/%7Eme/caf%c3%a9", true, 200, "/admin/~me/caf%C3%A9"},
		// A different path (case matters), routed as it decodes.
		{"/pub/%41dmin/x", false, 200, "/public/Admin/x"},
		{"/pub/a%2Bb%3Ac/caf%c3%a9/%7B%7d", false, 200, "/public/a+b:c/caf%C3%A9/%7B%7D"},
		// Spellings a backend may read as another path.
		{"/pub/%2561dmin/x", false, 400, ""},
		{"/pub/%2e%2e/admin/x", false, 400, ""},
		{"/pub/..;/admin/x", false, 400, ""},
		{"/pub/admin;x/y", false, 400, ""},
		{"/pub/%3Badmin/x", false, 400, ""},
		{"/pub%2Fadmin/x", false, 400, ""},
		{"/pub/%C0%AE%C0%AE/admin/x", false, 400, ""},
		{"/pub/%5Cadmin/x", false, 400, ""},
	} {
		seen.Store("")
		var hdr []string
		if tc.key {
			hdr = []string{"X-Api-Key", key}
		}
		r := g.Do("GET", tc.path, nil, hdr...)
		if r.Status != tc.status {
			t.Errorf("%s (key %v): %d %s, want %d", tc.path, tc.key, r.Status, r.Body, tc.status)
			continue
		}
		if got := seen.Load(); got != tc.sees {
			t.Errorf("%s (key %v): backend saw %q, want %q", tc.path, tc.key, got, tc.sees)
		}
	}
}
