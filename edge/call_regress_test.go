package edge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// The edge_concurrency slot a call takes (call.limitInFlight) is given
// back however the call ends after taking it: a body over max_body, a
// caller that goes away mid-call, a deadline passed, a worker's gateway
// error. One slot leaked would refuse every later call of the API with
// OVERLOADED.
func TestEdgeConcurrencySlotReleasedOnEveryEnd(t *testing.T) {
	entered := make(chan struct{}, 4)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/e/hang" {
			entered <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"e","pool":"p","route":{"method":"*","path":"/e/{x}"},"timeout":"300ms","edge_concurrency":1,"max_body":"16B",
		"backend":{"type":"http","url":"` + backend.URL + `/e/{x}"}}`)
	g.Publish(`{"name":"down","pool":"p","route":{"path":"/down"},"edge_concurrency":1,
		"backend":{"type":"http","url":"http://127.0.0.1:1/"}}`)

	ok := func(when string) {
		t.Helper()
		if r := g.Do("GET", "/e/x", nil); r.Status != 200 || r.Body != "ok" {
			t.Fatalf("after %s: %d %s", when, r.Status, r.Body)
		}
	}
	ok("nothing")

	if r := g.Do("POST", "/e/x", strings.NewReader(strings.Repeat("b", 17))); r.Status != 413 {
		t.Fatalf("body over max_body: %d %s", r.Status, r.Body)
	}
	ok("a body over max_body")
	// Chunked, so that the limit is found while reading, not from Content-Length.
	if r := g.Do("POST", "/e/x", io.MultiReader(strings.NewReader(strings.Repeat("b", 17)))); r.Status != 413 {
		t.Fatalf("chunked body over max_body: %d %s", r.Status, r.Body)
	}
	ok("a chunked body over max_body")

	if r := g.Do("GET", "/e/hang", nil); r.Status != 504 || r.Code != "GATEWAY_TIMEOUT" {
		t.Fatalf("hanging backend: %d %s", r.Status, r.Body)
	}
	<-entered
	ok("a deadline passed")

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/e/hang", nil)
	gone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	<-entered
	cancel()
	<-gone
	// The edge learns of the cancel asynchronously: give it the time to end
	// the call (well within the API's 300ms timeout).
	var r jetwaytest.Result
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r = g.Do("GET", "/e/x", nil)
		if r.Status == 200 || time.Now().After(deadline) {
			break
		}
	}
	if r.Status != 200 {
		t.Fatalf("after a caller went away mid-call: %d %s", r.Status, r.Body)
	}

	for i := 0; i < 3; i++ {
		if r := g.Do("GET", "/down", nil); r.Status != 502 || r.Code != "BAD_GATEWAY" {
			t.Fatalf("call %d to an unreachable backend: %d %s (a leaked slot answers OVERLOADED)", i, r.Status, r.Body)
		}
	}
}
