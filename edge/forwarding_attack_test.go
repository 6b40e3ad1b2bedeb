package edge_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Method-override headers change the method many backends act on: Rack
// (Rails' default stack) and Symfony take X-HTTP-Method-Override on a POST
// as the real method, OData X-HTTP-Method, Google's APIs X-Method-Override.
// A caller must not turn a published POST into a DELETE the edge never
// routed (or guards with another route's auth), any more than it may pass
// another path in X-Original-Url.
func TestCallerMethodOverrideDropped(t *testing.T) {
	acted := make(chan string, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := r.Method // as Rack::MethodOverride reads it
		for _, h := range []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"} {
			if v := r.Header.Get(h); v != "" && r.Method == "POST" {
				m = v
			}
		}
		acted <- m
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"items.add","pool":"p","route":{"method":"POST","path":"/items"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	if r := g.Do("DELETE", "/items", nil); r.Status != 405 {
		t.Fatalf("DELETE /items: %d, want 405 (not published)", r.Status)
	}
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		if r := g.Do("POST", "/items", nil, h, "DELETE"); r.Status != 200 {
			t.Fatalf("POST /items: %d %s", r.Status, r.Body)
		}
		if m := <-acted; m != "POST" {
			t.Errorf("with %s the backend acted on %s /items, which the edge does not route", h, m)
		}
	}
}
