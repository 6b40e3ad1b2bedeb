package edge_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// Authenticate writes nothing: it returns the app or a typed refusal, so a
// transport other than the edge's HTTP handler (push) can admit clients by
// the same keys.
func TestAuthenticateReturnsNotWrites(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"au.orders","pool":"p","route":{"path":"/au/orders"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	g.Publish(`{"name":"au.users","pool":"p","route":{"path":"/au/users"},"backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	g.Publish(`{"name":"au.open","pool":"p","route":{"path":"/au/open"},"backend":{"type":"mock"}}`)
	key := g.PutKeyedApp("shop", "au.orders")
	if g.Edge.AuthPolicy("au.open") != nil {
		t.Fatal("an open API has an auth policy")
	}
	addr := netip.MustParseAddr("127.0.0.1")
	call := func(api, key string) (string, error) {
		r, _ := http.NewRequest("GET", "http://x/au", nil)
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		app, err := edge.Authenticate(r, g.Edge.AuthPolicy(api), edge.Caller{Addr: addr})
		if r.Header.Get("X-Api-Key") != "" {
			t.Errorf("%s: the key was left in the request headers", api)
		}
		if app == nil {
			return "", err
		}
		return app.ID, err
	}
	if app, err := call("au.orders", key); app != "shop" || err != nil {
		t.Errorf("granted: app %q, err %v", app, err)
	}
	var ae *edge.Error
	if _, err := call("au.orders", ""); !errors.As(err, &ae) || ae.Code != bus.CodeUnauthenticated {
		t.Errorf("no key: %v", err)
	}
	if app, err := call("au.users", key); !errors.As(err, &ae) || ae.Code != bus.CodeForbidden || app != "shop" {
		t.Errorf("not granted: app %q, err %v (want 403 with the app, so its refusals count as its own)", app, err)
	}
	if app, err := edge.Authenticate(&http.Request{Header: http.Header{}}, nil, edge.Caller{}); app != nil || err != nil {
		t.Errorf("open API: %v %v", app, err)
	}
}

// A signature header on an API that does not take signed requests is just
// a credential it refuses: the edge reads no body for it (before the grant
// and the limits) and answers 401, not 413 after reading up to max_body.
func TestSignatureOnAnAPIWithoutHMACReadsNoBody(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"ns.post","pool":"p","route":{"method":"POST","path":"/ns"},"max_body":"1KiB","backend":{"type":"mock"},"auth":{"methods":["key"]}}`)
	r := g.Do("POST", "/ns", strings.NewReader(strings.Repeat("x", 4096)),
		"Authorization", "JW1-HMAC-SHA256 app=shop,ts=1,nonce=n,sig=s")
	if r.Status != http.StatusUnauthorized || r.Code != string(bus.CodeUnauthenticated) {
		t.Fatalf("%d %s, want 401 UNAUTHENTICATED without reading the body", r.Status, r.Body)
	}
}
