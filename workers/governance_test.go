package workers_test

// The worker's traffic governance (README.md, "Traffic governance"):
// retries, the retry budget, the circuit breaker and the fallback chain,
// tested through a whole gateway (internal/jetwaytest) against real
// httptest backends.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/workers"
)

// backend is an HTTP backend that fails or hangs on cue and remembers the
// time budget each call was given.
type backend struct {
	*httptest.Server
	hits    atomic.Int64
	failing atomic.Bool  // answer 500 to every call
	failN   atomic.Int64 // answer 500 to this many more calls
	hangN   atomic.Int64 // hang (until the call gives up) on this many more calls
	hang    chan struct{}

	mu      sync.Mutex
	budgets []int // X-Request-Timeout of each call, in ms
}

func newBackend(t *testing.T, body string) *backend {
	b := &backend{hang: make(chan struct{})}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		ms, _ := strconv.Atoi(r.Header.Get("X-Request-Timeout"))
		b.mu.Lock()
		b.budgets = append(b.budgets, ms)
		b.mu.Unlock()
		if b.hangN.Add(-1) >= 0 {
			select {
			case <-b.hang:
			case <-r.Context().Done():
			}
			return
		}
		if b.failing.Load() || b.failN.Add(-1) >= 0 {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "backend failed")
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, body+" "+r.URL.RawQuery)
	}))
	t.Cleanup(func() { close(b.hang); b.Close() })
	return b
}

// reset forgets the calls seen so far.
func (b *backend) reset() {
	b.hits.Store(0)
	b.mu.Lock()
	b.budgets = nil
	b.mu.Unlock()
}

func (b *backend) seenBudgets() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.budgets...)
}

func httpAPI(name, path string, b *backend, policy string) string {
	return `{"name":"` + name + `","pool":"p","route":{"method":"*","path":"` + path + `"},
		"backend":{"type":"http","url":"` + b.URL + `"}` + policy + `}`
}

// Retries: `attempts` in all, only on the conditions in `on`, only for
// idempotent methods or requests with an Idempotency-Key.
func TestRetryPolicy(t *testing.T) {
	be := newBackend(t, "ok")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("r.5xx", "/5xx", be, `,"retry":{"attempts":3,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"}`))
	g.Publish(httpAPI("r.default", "/default", be, `,"retry":{"attempts":3,"backoff":"1ms","max_backoff":"2ms"}`))

	call := func(method, path string, failN int64, hdr ...string) (jetwaytest.Result, int64) {
		t.Helper()
		be.reset()
		be.failN.Store(failN)
		r := g.Do(method, path, strings.NewReader("x"), hdr...)
		be.failN.Store(0)
		return r, be.hits.Load()
	}
	for _, tc := range []struct {
		name, method, path string
		failN              int64
		hdr                []string
		status             int
		hits               int64
	}{
		{"two failures then success", "GET", "/5xx", 2, nil, 200, 3},
		{"attempts counts the first call", "GET", "/5xx", 3, nil, 500, 3},
		{"PUT is idempotent", "PUT", "/5xx", 1, nil, 200, 2},
		{"DELETE is idempotent", "DELETE", "/5xx", 1, nil, 200, 2},
		{"POST is not retried", "POST", "/5xx", 1, nil, 500, 1},
		{"PATCH is not retried", "PATCH", "/5xx", 1, nil, 500, 1},
		{"POST with an Idempotency-Key is", "POST", "/5xx", 1, []string{"Idempotency-Key", "k1"}, 200, 2},
		{"5xx is not retried by default", "GET", "/default", 1, nil, 500, 1},
	} {
		r, hits := call(tc.method, tc.path, tc.failN, tc.hdr...)
		if r.Status != tc.status || hits != tc.hits {
			t.Errorf("%s: %d %q after %d backend calls, want %d after %d", tc.name, r.Status, r.Body, hits, tc.status, tc.hits)
		}
		// What the caller gets after the last attempt is the backend's own
		// answer, untouched.
		if r.Status == 500 && (r.Body != "backend failed" || r.Code != "") {
			t.Errorf("%s: the last failure was not passed through: %q", tc.name, r.Body)
		}
	}

	// An unreachable backend is a connect failure: retried by default.
	g.Publish(`{"name":"r.down","pool":"p","route":{"path":"/down"},"backend":{"type":"http","url":"http://127.0.0.1:1/x"},
		"retry":{"attempts":2,"backoff":"1ms","max_backoff":"2ms"}}`)
	if r := g.Do("GET", "/down", nil); r.Status != 502 || r.Code != "BAD_GATEWAY" {
		t.Errorf("unreachable backend: %d %s", r.Status, r.Body)
	}
}

// Each attempt gets min(time left, attempt_timeout), and the backend is
// told so in X-Request-Timeout; an attempt that times out is retried on
// "timeout".
func TestRetryAttemptTimeout(t *testing.T) {
	be := newBackend(t, "ok")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("at", "/at", be, `,"timeout":"5s",
		"retry":{"attempts":2,"on":["timeout"],"attempt_timeout":"150ms","backoff":"1ms","max_backoff":"2ms"}`))
	be.hangN.Store(1)
	start := time.Now()
	r := g.Do("GET", "/at", nil)
	if took := time.Since(start); r.Status != 200 || be.hits.Load() != 2 || took > 2*time.Second {
		t.Fatalf("got %d %q after %d calls in %v, want 200 after 2 (the first timed out at 150ms)", r.Status, r.Body, be.hits.Load(), took)
	}
	for i, ms := range be.seenBudgets() {
		if ms <= 0 || ms > 150 {
			t.Errorf("attempt %d was given %dms, want at most the attempt_timeout of 150ms", i+1, ms)
		}
	}
}

// No attempt starts with less than min_attempt of the deadline left: the
// caller gets the timeout at once rather than a hopeless last try.
func TestRetryMinAttempt(t *testing.T) {
	be := newBackend(t, "ok")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("ma", "/ma", be, `,"timeout":"400ms",
		"retry":{"attempts":3,"on":["timeout"],"attempt_timeout":"250ms","min_attempt":"200ms","backoff":"1ms","max_backoff":"2ms"}`))
	be.hangN.Store(10)
	start := time.Now()
	r := g.Do("GET", "/ma", nil)
	if r.Status != 504 || r.Code != "GATEWAY_TIMEOUT" || be.hits.Load() != 1 {
		t.Fatalf("got %d %s after %d calls, want 504 GATEWAY_TIMEOUT after 1 (150ms left < min_attempt)", r.Status, r.Body, be.hits.Load())
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the timeout took %v", took)
	}
}

// The retry budget: over its window, retries stay within ratio × calls +
// min_per_second × window, so a failing backend never sees a retry storm;
// within the budget, failing calls are still retried.
func TestRetryBudgetBoundsAStorm(t *testing.T) {
	be := newBackend(t, "ok")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("rb", "/rb", be, `,"retry":{"attempts":3,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms",
		"budget":{"ratio":0.2,"min_per_second":0.1,"window":"10s"}}`))
	be.failing.Store(true)
	const calls = 50
	for i := 0; i < calls; i++ {
		if r := g.Do("GET", "/rb", nil); r.Status != 500 {
			t.Fatalf("call %d: %d %s", i, r.Status, r.Body)
		}
	}
	// 0.2 × 50 + 0.1/s × 10s = 11; without a budget, 2 × 50 = 100.
	retries := be.hits.Load() - calls
	if retries > 11 || retries < 5 {
		t.Fatalf("%d retries for %d failing calls, want about 11 (the budget)", retries, calls)
	}
}

func waitBreaker(t *testing.T, w *workers.Worker, api, state string) {
	t.Helper()
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if st, _ := w.BreakerState(api); st != state {
			return fmt.Errorf("breaker %q, want %q", st, state)
		}
		return nil
	})
}

// The breaker's life: closed → open after consecutive failures (calls fail
// at once with CIRCUIT_OPEN, the backend is spared) → half-open after
// open_for, where only half_open_probes calls probe → a failed probe opens
// it again for twice as long, capped at max_open_for → all probes succeed
// → closed. Each change is published with its reason.
func TestBreakerOpenHalfOpenClose(t *testing.T) {
	be := newBackend(t, "ok")
	g := jetwaytest.Start(t)
	events := g.BreakerEvents("bk")
	g.Publish(httpAPI("bk", "/bk", be, `,"breaker":{"consecutive_failures":2,"open_for":"100ms","max_open_for":"300ms",
		"half_open_probes":2,"slow_start":"-1s"}`))
	if st, ok := g.Worker.BreakerState("bk"); !ok || st != "closed" {
		t.Fatalf("a new breaker is %q, %v", st, ok)
	}
	if open := g.Worker.OpenBreakers(time.Now()); len(open) != 0 {
		t.Fatalf("open breakers before any failure: %v (heartbeats say them)", open)
	}
	be.failing.Store(true)
	for i := 0; i < 2; i++ {
		if r := g.Do("GET", "/bk", nil); r.Status != 500 || r.Body != "backend failed" {
			t.Fatalf("call %d: %d %q (a backend's own error passes through)", i, r.Status, r.Body)
		}
	}
	ev := jetwaytest.NextBreakerEvent(t, events)
	if ev.From != "closed" || ev.To != "open" || ev.API != "bk" || ev.OpenFor != "100ms" ||
		!strings.Contains(ev.Reason, "2 consecutive failures") || !strings.Contains(ev.Backend, be.URL) {
		t.Fatalf("open event %+v", ev)
	}
	if open := g.Worker.OpenBreakers(time.Now()); len(open) != 1 || open[0] != "bk" {
		t.Fatalf("open breakers: %v, want [bk]", open)
	}
	hits := be.hits.Load()
	if r := g.Do("GET", "/bk", nil); r.Status != 503 || r.Code != "CIRCUIT_OPEN" || be.hits.Load() != hits {
		t.Fatalf("while open: %d %s (backend hits %d → %d)", r.Status, r.Body, hits, be.hits.Load())
	}

	// Half-open: a failing probe opens it again, each time for twice as
	// long, never longer than max_open_for.
	for _, openFor := range []string{"200ms", "300ms", "300ms"} {
		waitBreaker(t, g.Worker, "bk", "half-open")
		if r := g.Do("GET", "/bk", nil); r.Status != 500 {
			t.Fatalf("failing probe: %d %s", r.Status, r.Body)
		}
		if ev := jetwaytest.NextBreakerEvent(t, events); ev.From != "half-open" || ev.To != "open" || ev.OpenFor != openFor || ev.Reason != "probe failed" {
			t.Fatalf("reopen event %+v, want open for %s", ev, openFor)
		}
	}

	// Only half_open_probes calls probe at once: with both probes held at
	// the backend, a third call is refused without reaching it.
	be.failing.Store(false)
	waitBreaker(t, g.Worker, "bk", "half-open")
	be.hangN.Store(2)
	be.reset()
	var wg sync.WaitGroup
	probes := make([]jetwaytest.Result, 2)
	for i := range probes {
		wg.Add(1)
		go func() { defer wg.Done(); probes[i] = g.Do("GET", "/bk", nil) }()
	}
	natstest.CheckFor(t, 2*time.Second, time.Millisecond, func() error {
		if n := be.hits.Load(); n != 2 {
			return fmt.Errorf("%d probes at the backend", n)
		}
		return nil
	})
	if r := g.Do("GET", "/bk", nil); r.Status != 503 || r.Code != "CIRCUIT_OPEN" || be.hits.Load() != 2 {
		t.Fatalf("third call while two probes are out: %d %s", r.Status, r.Body)
	}
	// The probes were held past nothing but the test: let them answer.
	be.hang <- struct{}{}
	be.hang <- struct{}{}
	wg.Wait()
	for i, r := range probes {
		if r.Status != 200 {
			t.Fatalf("probe %d: %d %s", i, r.Status, r.Body)
		}
	}
	if ev := jetwaytest.NextBreakerEvent(t, events); ev.From != "half-open" || ev.To != "closed" || ev.Reason != "2 of 2 probes succeeded" {
		t.Fatalf("close event %+v", ev)
	}
	if st, _ := g.Worker.BreakerState("bk"); st != "closed" {
		t.Fatalf("after the probes: %q", st)
	}
	if r := g.Do("GET", "/bk", nil); r.Status != 200 {
		t.Fatalf("closed again: %d %s", r.Status, r.Body)
	}
}

// The fallback chain, in order: another API, then the cached last good
// response to the same method, path and query, then the static response;
// each answer says which in X-Jetway-Fallback.
func TestFallbackChain(t *testing.T) {
	be := newBackend(t, "live")
	alt := newBackend(t, "alt")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("fc.alt", "/fc/alt", alt, ""))
	g.Publish(httpAPI("fc", "/fc", be, `,"fallback":{"api":"fc.alt","cached":true,"static":{"status":203,"headers":{"X-S":"1"},"body":"static"}}`))

	if r := g.Do("GET", "/fc?q=1", nil); r.Status != 200 || r.Body != "live q=1" || r.Header.Get("X-Jetway-Fallback") != "" {
		t.Fatalf("healthy: %d %q %v", r.Status, r.Body, r.Header)
	}
	be.failing.Store(true)
	// Another API first, even with a cached answer at hand; it gets the
	// same request.
	if r := g.Do("GET", "/fc?q=1", nil); r.Status != 200 || r.Body != "alt q=1" || r.Header.Get("X-Jetway-Fallback") != "api fc.alt" {
		t.Fatalf("api fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	// That API failing too: the last good response to the same request.
	alt.failing.Store(true)
	r := g.Do("GET", "/fc?q=1", nil)
	if r.Status != 200 || r.Body != "live q=1" || r.Header.Get("X-Jetway-Fallback") != "cached" ||
		r.Header.Get("Content-Type") != "text/plain" || r.Header.Get("Age") == "" {
		t.Fatalf("cached fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	// Nothing cached for this query: the static response.
	r = g.Do("GET", "/fc?q=2", nil)
	if r.Status != 203 || r.Body != "static" || r.Header.Get("X-S") != "1" || r.Header.Get("X-Jetway-Fallback") != "static" {
		t.Fatalf("static fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	// An unreachable backend counts as a 5xx.
	g.Publish(`{"name":"fc.down","pool":"p","route":{"path":"/fc/down"},"backend":{"type":"http","url":"http://127.0.0.1:1/x"},
		"fallback":{"static":{"body":"static"}}}`)
	if r := g.Do("GET", "/fc/down", nil); r.Status != 200 || r.Body != "static" {
		t.Fatalf("unreachable backend: %d %q", r.Status, r.Body)
	}
}

// A fallback applies only to the failures in its `on`: "circuit_open"
// answers instead of CIRCUIT_OPEN, while a 5xx it does not list passes
// through untouched.
func TestFallbackOn(t *testing.T) {
	be := newBackend(t, "live")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("fo", "/fo", be, `,"breaker":{"consecutive_failures":2,"open_for":"1m"},
		"fallback":{"on":["circuit_open"],"static":{"body":"static"}}`))
	be.failing.Store(true)
	for i := 0; i < 2; i++ {
		if r := g.Do("GET", "/fo", nil); r.Status != 500 || r.Body != "backend failed" || r.Header.Get("X-Jetway-Fallback") != "" {
			t.Fatalf("a 5xx not in on: %d %q %v", r.Status, r.Body, r.Header)
		}
	}
	waitBreaker(t, g.Worker, "fo", "open")
	hits := be.hits.Load()
	if r := g.Do("GET", "/fo", nil); r.Status != 200 || r.Body != "static" || r.Header.Get("X-Jetway-Fallback") != "static" || be.hits.Load() != hits {
		t.Fatalf("circuit open: %d %q %v", r.Status, r.Body, r.Header)
	}
}

// Retry and fallback together: the fallback answers only once the retries
// are spent.
func TestFallbackAfterRetries(t *testing.T) {
	be := newBackend(t, "live")
	g := jetwaytest.Start(t)
	g.Publish(httpAPI("fr", "/fr", be, `,"retry":{"attempts":3,"on":["5xx"],"backoff":"1ms","max_backoff":"2ms"},
		"fallback":{"static":{"body":"static"}}`))
	be.failN.Store(2)
	if r := g.Do("GET", "/fr", nil); r.Status != 200 || r.Body != "live " || be.hits.Load() != 3 {
		t.Fatalf("recovered on the third attempt: %d %q after %d calls", r.Status, r.Body, be.hits.Load())
	}
	be.reset()
	be.failing.Store(true)
	if r := g.Do("GET", "/fr", nil); r.Status != 200 || r.Body != "static" || be.hits.Load() != 3 {
		t.Fatalf("all attempts failed: %d %q after %d calls", r.Status, r.Body, be.hits.Load())
	}
}
