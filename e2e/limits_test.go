package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// TestConcurrencyLimit fills an API's per-worker concurrency of 2 with
// calls the backend holds: a third call is refused at once with 503
// OVERLOADED (not queued), and the two held calls still complete.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	be := itemsBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "limited")
	putAPI(t, c.url, entry("limited.items", "limited", "GET", "/v1/limited/{id}", httpBackend(be.URL+"/items/{id}"),
		map[string]any{"timeout": "10s", "concurrency": 2}))
	waitBody(t, edge.edge+"/v1/limited/probe", "item probe")
	before := be.hits.Load()

	held := []<-chan callResult{callAsync(edge.edge + "/v1/limited/block"), callAsync(edge.edge + "/v1/limited/block")}
	be.waitArrivals(t, "/items/block", 2, 15*time.Second) // setup: generous under -race on a loaded box

	r := get(t, edge.edge+"/v1/limited/3")
	wantError(t, r, http.StatusServiceUnavailable, "OVERLOADED")
	if r.took >= time.Second {
		t.Errorf("OVERLOADED after %v, want at once", r.took)
	}
	if n := be.hits.Load() - before; n != 2 {
		t.Errorf("backend saw %d requests, want the 2 held ones: the refused call must not reach it", n)
	}

	be.release()
	for _, ch := range held {
		wantDone(t, ch, "released")
	}
	// Capacity is back once the held calls are done.
	waitBody(t, edge.edge+"/v1/limited/4", "item 4")
}

// TestBodyLimit checks max_body at the edge: a body over the limit (with a
// Content-Length, or chunked) gets 413 PAYLOAD_TOO_LARGE and never reaches
// the backend; a body at the limit passes whole.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	var got atomic.Pointer[[]byte]
	be := newBackend(t, func(_ *backend, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(&b)
		_, _ = io.WriteString(w, "ok")
	})
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "body")
	putAPI(t, c.url, entry("body.upload", "body", "POST", "/v1/upload", httpBackend(be.URL+"/upload"),
		map[string]any{"max_body": "1KiB", "timeout": "5s"}))
	url := edge.edge + "/v1/upload"
	post := func(body io.Reader) response {
		t.Helper()
		r, err := do(http.MethodPost, url, body, http.Header{"Content-Type": {"application/octet-stream"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Wait until a worker serves the API, then count.
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
		if r := post(strings.NewReader("x")); r.status != http.StatusOK {
			return fmt.Errorf("POST %s: %v", url, r)
		}
		return nil
	})
	before := be.hits.Load()

	// The route is POST only: another method is a gateway error.
	wantError(t, get(t, url), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")

	big := bytes.Repeat([]byte("a"), 2048)
	r := post(bytes.NewReader(big))
	wantError(t, r, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
	// Without Content-Length (chunked): the limit holds while reading.
	r = post(io.MultiReader(bytes.NewReader(big)))
	wantError(t, r, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")

	exact := bytes.Repeat([]byte("b"), 1024)
	if r := post(bytes.NewReader(exact)); r.status != http.StatusOK {
		t.Fatalf("POST of exactly max_body: %v, want 200", r)
	}
	if n := be.hits.Load() - before; n != 1 {
		t.Errorf("backend saw %d requests for 2 refused and 1 accepted call, want 1", n)
	}
	if b := got.Load(); b == nil || !bytes.Equal(*b, exact) {
		t.Errorf("backend did not get the exact %d bytes sent", len(exact))
	}
}

// TestNoRouteAndBackendErrors checks that gateway errors and backend errors
// never mix: an unknown route is the gateway's 404 ROUTE_NOT_FOUND (JSON,
// with the request id), while a backend's own 500 with its own body and
// headers passes through byte for byte, with no code added.
func TestNoRouteAndBackendErrors(t *testing.T) {
	t.Parallel()
	const body = `{"error":"database on fire","code":42}` + "\n"
	be := newBackend(t, func(_ *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.e2e+json")
		w.Header().Set("X-Backend-Trace", "abc-123")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, body)
	})
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "errs")

	r := get(t, edge.edge+"/v1/no/such/route")
	wantError(t, r, http.StatusNotFound, "ROUTE_NOT_FOUND")
	// A caller's request id is kept.
	r, err := do(http.MethodGet, edge.edge+"/v1/nothing", nil, http.Header{"X-Request-Id": {"e2e-req-1"}})
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, r, http.StatusNotFound, "ROUTE_NOT_FOUND")
	if id := r.gwErr().RequestID; id != "e2e-req-1" {
		t.Errorf("request_id %q, want the caller's e2e-req-1", id)
	}

	putAPI(t, c.url, entry("errs.fail", "errs", "GET", "/v1/fail", httpBackend(be.URL+"/fail"), map[string]any{"timeout": "5s"}))
	r = waitStatus(t, edge.edge+"/v1/fail", http.StatusInternalServerError)
	if string(r.body) != body {
		t.Errorf("backend body changed: got %q, want %q", r.body, body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/vnd.e2e+json" {
		t.Errorf("Content-Type %q, want the backend's", ct)
	}
	if h := r.header.Get("X-Backend-Trace"); h != "abc-123" {
		t.Errorf("X-Backend-Trace %q, want the backend's", h)
	}
	for k := range r.header {
		if strings.HasPrefix(k, "Jetway-") {
			t.Errorf("wire header %s leaked to the caller", k)
		}
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Errorf("no X-Request-Id on a passed-through response")
	}
}
