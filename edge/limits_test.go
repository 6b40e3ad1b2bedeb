package edge_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// burst sends n requests at once and tallies statuses.
func (g *gateway) burst(n int, path string, hdr ...string) map[int]int {
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := g.Do("GET", path, nil, hdr...)
			mu.Lock()
			got[r.Status]++
			mu.Unlock()
			if r.Status == 429 {
				if r.Code != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
					g.T.Errorf("429 without code or Retry-After: %v %s", r.Header, r.Body)
				}
			}
		}()
	}
	wg.Wait()
	return got
}

func TestRateLimitRejectExactCounts(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"rl","pool":"p","route":{"path":"/rl/{id}"},"backend":{"type":"mock","body":"ok"},
		"rate_limits":[{"name":"per-minute","limit":5,"window":"1m"}]}`)
	if got := g.burst(12, "/rl/1"); got[200] != 5 || got[429] != 7 {
		t.Fatalf("burst of 12 against 5/min: %v", got)
	}
	r := g.Do("GET", "/rl/1", nil)
	if secs, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Status != 429 || secs < 1 || secs > 60 {
		t.Fatalf("Retry-After %q (status %d)", r.Header.Get("Retry-After"), r.Status)
	}
	// An unrelated registry change keeps the rule's count.
	g.Publish(`{"name":"other","pool":"p","route":{"path":"/other"},"backend":{"type":"mock"}}`)
	if r := g.Do("GET", "/rl/1", nil); r.Status != 429 {
		t.Fatalf("after an unrelated change the limit reset: %d", r.Status)
	}
}

func TestRateLimitKeyedAndHotValues(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"k","pool":"p","route":{"path":"/k/{item}"},"backend":{"type":"mock","body":"ok"},
		"rate_limits":[
			{"name":"region","key":["header:X-Region"],"limit":3,"window":"1m"},
			{"name":"item","key":["param:item"],"limit":2,"window":"1m","exceptions":{"hot":4,"banned":0}}]}`)
	if got := g.burst(6, "/k/a", "X-Region", "eu"); got[200] != 2 {
		t.Errorf("item a in eu: %v (item limit 2)", got)
	}
	if got := g.burst(6, "/k/hot", "X-Region", "us"); got[200] != 3 {
		t.Errorf("hot item in us: %v (region limit 3 binds before the hot item's 4)", got)
	}
	if got := g.burst(6, "/k/hot", "X-Region", "ap"); got[200] != 1 {
		t.Errorf("hot item in ap: %v (1 left of the hot item's 4)", got)
	}
	if got := g.burst(2, "/k/banned", "X-Region", "sa"); got[200] != 0 {
		t.Errorf("banned item: %v (exception 0 refuses all)", got)
	}
}

func TestRateLimitQueueSpacesCalls(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"q","pool":"p","route":{"path":"/q"},"backend":{"type":"mock","body":"ok"},
		"rate_limits":[{"behavior":"queue","limit":20,"window":"1s","max_queue":"2s"}]}`)
	start := time.Now()
	if got := g.burst(5, "/q"); got[200] != 5 {
		t.Fatalf("queued burst: %v", got)
	}
	// 5 calls at 20/s: the last passes ~200ms after the first (4 × 50ms).
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("5 queued calls took %v: they were not spaced", d)
	}
	// A queue that would outlast the max_queue refuses.
	g.Publish(`{"name":"q2","pool":"p","route":{"path":"/q2"},"backend":{"type":"mock","body":"ok"},
		"rate_limits":[{"behavior":"queue","limit":1,"window":"1s","max_queue":"100ms"}]}`)
	if got := g.burst(3, "/q2"); got[200] != 1 || got[429] != 2 {
		t.Fatalf("queue past max_queue: %v", got)
	}
}

func TestConcurrencyCaps(t *testing.T) {
	release := make(chan struct{})
	var inBackend atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inBackend.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "done")
	}))
	defer backend.Close()
	defer close(release)
	g := newGateway(t)
	g.Publish(`{"name":"c","pool":"p","route":{"path":"/c"},"timeout":"5s","backend":{"type":"http","url":"` + backend.URL + `"},
		"rate_limits":[{"behavior":"concurrency","key":["header:X-App"],"limit":1}]}`)
	g.Publish(`{"name":"e","pool":"p","route":{"path":"/e"},"timeout":"5s","edge_concurrency":1,"backend":{"type":"http","url":"` + backend.URL + `"}}`)

	done := make(chan jetwaytest.Result, 3)
	go func() { done <- g.Do("GET", "/c", nil, "X-App", "a") }()
	go func() { done <- g.Do("GET", "/e", nil) }()
	waitFor := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); inBackend.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls in the backend, want %d", inBackend.Load(), n)
			}
		}
	}
	waitFor(2)
	if r := g.Do("GET", "/c", nil, "X-App", "a"); r.Status != 429 || r.Code != "RATE_LIMITED" {
		t.Errorf("second call of app a: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/e", nil); r.Status != 503 || r.Code != "OVERLOADED" {
		t.Errorf("second call over edge_concurrency 1: %d %s", r.Status, r.Body)
	}
	// Another key is not held up by app a.
	go func() { done <- g.Do("GET", "/c", nil, "X-App", "b") }()
	waitFor(3)
	for i := 0; i < 3; i++ {
		select {
		case release <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatal("a held call is not waiting in the backend")
		}
	}
	for i := 0; i < 3; i++ {
		if r := <-done; r.Status != 200 {
			t.Errorf("held call: %d %s", r.Status, r.Body)
		}
	}
}

func TestClientShortensDeadline(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"s","pool":"p","route":{"path":"/s"},"timeout":"3s","backend":{"type":"http","url":"` + backend.URL + `"}}`)
	for _, v := range []string{"200ms", "200"} {
		start := time.Now()
		r := g.Do("GET", "/s", nil, "X-Request-Timeout", v)
		if took := time.Since(start); r.Status != 504 || took > 2*time.Second {
			t.Errorf("X-Request-Timeout %s: %d after %v", v, r.Status, took)
		}
	}
}

// A caller cannot pick the app its calls count against by sending the
// wire's own header.
func TestAppKeyCannotBeSpoofed(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"ak","pool":"p","route":{"path":"/ak"},"backend":{"type":"mock","body":"ok"},
		"rate_limits":[{"key":["app"],"limit":1,"window":"1m"}]}`)
	if r := g.Do("GET", "/ak", nil, "Jetway-App", "a"); r.Status != 200 {
		t.Fatalf("first: %d", r.Status)
	}
	if r := g.Do("GET", "/ak", nil, "Jetway-App", "b"); r.Status != 429 {
		t.Fatalf("a forged Jetway-App bought a fresh limit: %d", r.Status)
	}
}
