package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// flaky is a backend that fails on cue.
type flaky struct {
	*httptest.Server
	hits    atomic.Int64
	failing atomic.Bool
	failN   atomic.Int64 // fail this many more calls, then succeed
}

func newFlaky(t *testing.T) *flaky {
	f := &flaky{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if f.failing.Load() || f.failN.Add(-1) >= 0 {
			w.WriteHeader(500)
			io.WriteString(w, "backend failed")
			return
		}
		io.WriteString(w, "ok "+r.URL.RawQuery+" budget="+r.Header.Get("X-Request-Timeout"))
	}))
	t.Cleanup(f.Close)
	return f
}

func TestBreakerOpensAndProbesBack(t *testing.T) {
	be := newFlaky(t)
	g := newGateway(t)
	events := g.BreakerEvents("br")
	g.Publish(`{"name":"br","pool":"p","route":{"path":"/br"},"backend":{"type":"http","url":"` + be.URL + `"},
		"breaker":{"consecutive_failures":3,"open_for":"2s","half_open_probes":1,"slow_start":"-1s"}}`)
	be.failing.Store(true)
	for i := 0; i < 3; i++ {
		if r := g.Do("GET", "/br", nil); r.Status != 500 || r.Body != "backend failed" {
			t.Fatalf("call %d: %d %q (a backend's own error passes through)", i, r.Status, r.Body)
		}
	}
	ev := jetwaytest.NextBreakerEvent(t, events)
	if ev.To != "open" || ev.From != "closed" || !strings.Contains(ev.Reason, "3 consecutive failures") {
		t.Fatalf("open event %+v", ev)
	}
	hits := be.hits.Load()
	start := time.Now()
	r := g.Do("GET", "/br", nil)
	if r.Status != 503 || r.Code != "CIRCUIT_OPEN" || be.hits.Load() != hits || time.Since(start) > time.Second {
		t.Fatalf("while open: %d %s after %v (backend hits %d → %d)", r.Status, r.Body, time.Since(start), hits, be.hits.Load())
	}
	// The backend recovers; after the open period one probe closes it.
	be.failing.Store(false)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := g.Do("GET", "/br", nil); r.Status != 200 {
			return fmt.Errorf("still %d %s", r.Status, r.Code)
		}
		return nil
	})
	if ev := jetwaytest.NextBreakerEvent(t, events); ev.To != "closed" {
		t.Fatalf("close event %+v", ev)
	}
}

// A breaker opened by one worker of the pool opens on the others too.
func TestBreakerSharedAcrossPool(t *testing.T) {
	be := newFlaky(t)
	g := newGateway(t, "p")
	second := g.AddWorker("p")
	g.Publish(`{"name":"sh","pool":"p","route":{"path":"/sh"},"backend":{"type":"http","url":"` + be.URL + `"},
		"breaker":{"consecutive_failures":2,"open_for":"1m"}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if len(second.Subscribed()) == 0 {
			return fmt.Errorf("second worker not serving yet")
		}
		return nil
	})
	// Fail until one worker's breaker opens, then recover at once: the
	// other worker has seen at most one failure of its own, too few to
	// trip, so if it is open too, it learned that from the pool.
	events := g.BreakerEvents("sh")
	be.failing.Store(true)
	natstest.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		g.Do("GET", "/sh", nil)
		select {
		case ev := <-events:
			if ev.To != "open" {
				return fmt.Errorf("event %+v", ev)
			}
			return nil
		case <-time.After(20 * time.Millisecond): // the event is published before the reply; give it time to arrive
			return fmt.Errorf("no worker tripped yet")
		}
	})
	be.failing.Store(false)
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		for i, w := range []*workers.Worker{g.Worker, second} {
			if st, _ := w.BreakerState("sh"); st != "open" {
				return fmt.Errorf("worker %d breaker %q", i, st)
			}
		}
		return nil
	})
	hits := be.hits.Load()
	for i := 0; i < 20; i++ {
		if r := g.Do("GET", "/sh", nil); r.Code != "CIRCUIT_OPEN" {
			t.Fatalf("call %d reached a worker whose breaker did not open: %d %s", i, r.Status, r.Body)
		}
	}
	if be.hits.Load() != hits {
		t.Fatalf("backend hit %d times while the pool's breaker was open", be.hits.Load()-hits)
	}
}

func TestRetryPolicyAndBudget(t *testing.T) {
	be := newFlaky(t)
	g := newGateway(t)
	g.Publish(`{"name":"rt","pool":"p","route":{"method":"*","path":"/rt"},"backend":{"type":"http","url":"` + be.URL + `"},
		"retry":{"attempts":3,"on":["5xx"],"backoff":"1ms","max_backoff":"5ms","budget":{"ratio":0.1,"min_per_second":0.5,"window":"10s"}}}`)
	be.failN.Store(2)
	r := g.Do("GET", "/rt", nil)
	if r.Status != 200 || be.hits.Load() != 3 {
		t.Fatalf("GET after 2 failures: %d %q, %d backend hits (want 200 after 3)", r.Status, r.Body, be.hits.Load())
	}
	budget, _ := strconv.Atoi(strings.TrimPrefix(r.Body[strings.Index(r.Body, "budget="):], "budget="))
	if budget <= 0 || budget > 10000 {
		t.Errorf("backend was told %q of remaining budget", r.Body)
	}
	// POST is not idempotent: no retry, unless it has an Idempotency-Key.
	be.hits.Store(0)
	be.failN.Store(1)
	if r := g.Do("POST", "/rt", strings.NewReader("x")); r.Status != 500 || be.hits.Load() != 1 {
		t.Fatalf("POST: %d, %d hits", r.Status, be.hits.Load())
	}
	be.hits.Store(0)
	be.failN.Store(1)
	if r := g.Do("POST", "/rt", strings.NewReader("x"), "Idempotency-Key", "k1"); r.Status != 200 || be.hits.Load() != 2 {
		t.Fatalf("POST with Idempotency-Key: %d, %d hits", r.Status, be.hits.Load())
	}
	// A storm: the backend fails every call. Retries stay within the
	// budget: 10% of the calls plus 0.5/s × 10s.
	be.failing.Store(true)
	be.hits.Store(0)
	const calls = 100
	for i := 0; i < calls; i++ {
		g.Do("GET", "/rt", nil)
	}
	if retries := be.hits.Load() - calls; retries > calls/10+5+3 {
		t.Fatalf("%d retries for %d failing calls: the budget did not hold", retries, calls)
	}
}

func TestFallbackChain(t *testing.T) {
	be := newFlaky(t)
	g := newGateway(t)
	g.Publish(`{"name":"fb.alt","pool":"p","route":{"path":"/alt"},"backend":{"type":"mock","body":"from alt"}}`)
	g.Publish(`{"name":"fb.api","pool":"p","route":{"path":"/fb/api"},"backend":{"type":"http","url":"` + be.URL + `"},
		"fallback":{"api":"fb.alt"}}`)
	g.Publish(`{"name":"fb.cache","pool":"p","route":{"path":"/fb/cache"},"backend":{"type":"http","url":"` + be.URL + `"},
		"fallback":{"cached":true,"static":{"status":200,"body":"static"}}}`)
	if r := g.Do("GET", "/fb/cache?q=1", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "ok q=1") {
		t.Fatalf("healthy: %d %q", r.Status, r.Body)
	}
	be.failing.Store(true)
	if r := g.Do("GET", "/fb/api", nil); r.Status != 200 || r.Body != "from alt" || r.Header.Get("X-Jetway-Fallback") != "api fb.alt" {
		t.Errorf("api fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("GET", "/fb/cache?q=1", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "ok q=1") || r.Header.Get("X-Jetway-Fallback") != "cached" {
		t.Errorf("cached fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("GET", "/fb/cache?q=2", nil); r.Status != 200 || r.Body != "static" || r.Header.Get("X-Jetway-Fallback") != "static" {
		t.Errorf("static fallback (nothing cached for q=2): %d %q %v", r.Status, r.Body, r.Header)
	}
}

// A worker applies a breaker event only when it comes on the subject of the
// API's own pool, where NATS lets only that pool's workers publish; one on
// another pool's subject is ignored, whatever API it names.
func TestBreakerEventOfAnotherPoolIgnored(t *testing.T) {
	g := newGateway(t) // the worker serves every pool, so it hears them all
	g.Publish(`{"name":"bp","pool":"p","route":{"path":"/bp"},"backend":{"type":"mock","body":"fine"},
		"breaker":{"open_for":"1m"}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := g.Do("GET", "/bp", nil); r.Status != 200 {
			return fmt.Errorf("%d %s", r.Status, r.Body)
		}
		return nil
	})
	forged := func(subject string) {
		now := time.Now()
		b, _ := json.Marshal(workers.BreakerEvent{API: "bp", Node: "forger", From: "closed", To: "open", At: now,
			OpenFor: "1m", OpenUntil: now.Add(time.Minute), Gen: 7})
		if err := g.Conn.Publish(subject, b); err != nil {
			t.Fatal(err)
		}
		g.Conn.Flush()
	}
	forged(bus.BreakerSubject("q", "bp"))
	forged(workers.BreakerSubjectPrefix + "bp") // the old subject, without a pool
	time.Sleep(200 * time.Millisecond)
	if st, _ := g.Worker.BreakerState("bp"); st != "closed" {
		t.Fatalf("an event of another pool set the breaker %q", st)
	}
	forged(bus.BreakerSubject("p", "bp"))
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if r := g.Do("GET", "/bp", nil); r.Code != "CIRCUIT_OPEN" {
			return fmt.Errorf("the pool's own event not applied: %d %s", r.Status, r.Body)
		}
		return nil
	})
}

// A fallback to another API is the same call: that API's backend learns the
// authenticated app and the caller's address as the first backend would
// have (the worker used to re-encode the request without them).
func TestFallbackAPIGetsTheApp(t *testing.T) {
	be := newFlaky(t)
	be.failing.Store(true)
	var seen atomic.Value
	alt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(fmt.Sprintf("app=%s ip=%s", r.Header.Get("X-Jetway-App"), r.Header.Get("X-Real-Ip")))
		io.WriteString(w, "from alt")
	}))
	defer alt.Close()
	g := newGateway(t)
	key, rec, _ := registry.NewAPIKey()
	if _, err := g.Client.PutApp(context.Background(), &registry.App{ID: "shop", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Apps["shop"] == nil {
			return fmt.Errorf("app not loaded")
		}
		return nil
	})
	g.Publish(`{"name":"fba.alt","pool":"q","route":{"path":"/fba/alt"},"backend":{"type":"http","url":"` + alt.URL + `"}}`)
	g.Publish(`{"name":"fba.api","pool":"p","route":{"path":"/fba/api"},"backend":{"type":"http","url":"` + be.URL + `"},
		"auth":{"methods":["key"]},"fallback":{"api":"fba.alt"}}`)
	r := g.Do("GET", "/fba/api", nil, "X-Api-Key", key)
	if r.Status != 200 || r.Body != "from alt" || r.Header.Get("X-Jetway-Fallback") != "api fba.alt" {
		t.Fatalf("api fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	if got := seen.Load(); got != "app=shop ip=127.0.0.1" {
		t.Errorf("the fallback API's backend saw %v, want the app and the caller's address", got)
	}
}

// The last good answers that a degrade switch with "cached" and a
// worker's cached fallback replay are the asking app's own: one app never
// gets another's answer to the same path.
func TestLastGoodAnswersArePerApp(t *testing.T) {
	var failing atomic.Bool
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(500)
			return
		}
		fmt.Fprint(w, "for "+r.Header.Get("X-Jetway-App"))
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"mine","pool":"p","route":{"path":"/mine"},"backend":{"type":"http","url":"` + be.URL + `/"},
		"auth":{"methods":["key"]},"fallback":{"cached":true}}`)
	alice, bob := g.PutKeyedApp("alice"), g.PutKeyedApp("bob")
	if r := g.Do("GET", "/mine", nil, "X-Api-Key", alice); r.Body != "for alice" {
		t.Fatalf("alice: %d %s", r.Status, r.Body)
	}
	failing.Store(true)
	if r := g.Do("GET", "/mine", nil, "X-Api-Key", bob); strings.Contains(r.Body, "alice") {
		t.Errorf("the worker's cached fallback gave bob alice's answer: %d %s", r.Status, r.Body)
	}
	if _, err := g.Client.SetDegrade(t.Context(), "mine", &registry.Degrade{On: true, Cached: true}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := g.Do("GET", "/mine", nil, "X-Api-Key", alice); r.Header.Get("X-Jetway-Degraded") != "cached" || r.Body != "for alice" {
			return fmt.Errorf("alice degraded: %d %s %v", r.Status, r.Body, r.Header)
		}
		return nil
	})
	if r := g.Do("GET", "/mine", nil, "X-Api-Key", bob); strings.Contains(r.Body, "alice") {
		t.Errorf("the degrade switch gave bob alice's answer: %d %s", r.Status, r.Body)
	}
}
