package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// TestBulkheadHungAPI is the isolation test of issue 3, with real
// processes: one edge and two workers, one per pool. API A (pool a) has a
// backend that never answers; API B (pool b) has one that answers at once.
// While 32 goroutines hammer A and 8 hammer B for 3 s:
//
//   - every call of B answers 200 with the backend's body: zero errors;
//   - every call of A ends, within A's timeout + 1 s, with a gateway error:
//     504 GATEWAY_TIMEOUT (the call held a slot until its deadline) or
//     503 OVERLOADED (A's edge_concurrency or worker concurrency is full);
//     both occur, so the fault and the edge's cap are really exercised;
//   - the edge stays responsive: a mock API of pool b answers 200, and the
//     edge's /readyz answers 200, all through the fault.
//
// A goroutine whose call was refused with 503 waits 5 ms before the next
// one, as a client backing off would; without it 16 goroutines would spin on
// the edge's cheap refusal and the test would measure a 2-core machine's CPU
// rather than isolation (bench/governance_test.go measures latency).
func TestBulkheadHungAPI(t *testing.T) {
	t.Parallel()
	const (
		timeoutA  = time.Second
		capA      = 16 // A's concurrency (per worker) and edge_concurrency
		loadersA  = 32
		loadersB  = 8
		loadFor   = 3 * time.Second
		maxTookA  = timeoutA + time.Second
		refusedIn = 5 * time.Millisecond
	)
	hung := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) { b.block(w, r) })
	fast := newBackend(t, func(_ *backend, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "b ok") })

	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	workerA := c.startWorker(t, "worker-a", "a")
	c.startWorker(t, "worker-b", "b")
	putAPI(t, c.url, entry("a.hung", "a", "GET", "/v1/a/hung", httpBackend(hung.URL+"/hang"),
		map[string]any{"timeout": timeoutA.String(), "concurrency": capA, "edge_concurrency": capA}))
	putAPI(t, c.url, entry("b.fast", "b", "GET", "/v1/b/fast", httpBackend(fast.URL+"/fast"),
		map[string]any{"timeout": "5s", "concurrency": 64}))
	putAPI(t, c.url, entry("b.mock", "b", "GET", "/v1/b/mock", mockBackend("mock ok"), nil))
	urlA, urlB, urlMock := edge.edge+"/v1/a/hung", edge.edge+"/v1/b/fast", edge.edge+"/v1/b/mock"
	waitBody(t, urlB, "b ok")
	waitBody(t, urlMock, "mock ok")
	workerA.waitServing(t, "a.hung")
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
		if _, rz, err := edge.readyz(); err != nil || rz.Routes != 3 {
			return fmt.Errorf("edge routes %d apis (%v), want 3", rz.Routes, err)
		}
		return nil
	})

	// Our own client: the shared one keeps 2 idle connections per host,
	// and 40 goroutines would then dial (and leave in TIME_WAIT) a new
	// connection for most calls. Its timeout only turns a hang into a
	// recorded failure instead of a stuck test.
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	call := func(url string) (response, error) {
		start := time.Now()
		resp, err := hc.Get(url)
		if err != nil {
			return response{took: time.Since(start)}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b, took: time.Since(start)}, err
	}

	var (
		mu        sync.Mutex
		failures  []string // every unexpected outcome, capped when reported
		countA    = map[string]int{}
		countB    int
		latB      []time.Duration
		slowestA  time.Duration
		mockCalls int
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}

	end := time.Now().Add(loadFor)
	var wg sync.WaitGroup
	for range loadersA {
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := call(urlA)
				mu.Lock()
				slowestA = max(slowestA, r.took)
				mu.Unlock()
				if err != nil {
					fail("A: %v after %v", err, r.took.Round(time.Millisecond))
					continue
				}
				if r.took > maxTookA {
					fail("A: %v: later than timeout + 1s", r)
				}
				code := r.gwErr().Code
				switch {
				case r.status == http.StatusGatewayTimeout && code == "GATEWAY_TIMEOUT":
				case r.status == http.StatusServiceUnavailable && code == "OVERLOADED":
					time.Sleep(refusedIn)
				default:
					fail("A: %v, want 504 GATEWAY_TIMEOUT or 503 OVERLOADED", r)
				}
				mu.Lock()
				countA[fmt.Sprintf("%d %s", r.status, code)]++
				mu.Unlock()
			}
		})
	}
	for range loadersB {
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := call(urlB)
				if err != nil {
					fail("B: %v after %v", err, r.took.Round(time.Millisecond))
					continue
				}
				if r.status != http.StatusOK || string(r.body) != "b ok" {
					fail("B: %v, want 200 \"b ok\"", r)
				}
				mu.Lock()
				countB++
				latB = append(latB, r.took)
				mu.Unlock()
			}
		})
	}

	// Once A's backend holds a full pool of calls, the edge must keep
	// answering everything else: a mock API of pool b and its own /readyz.
	natstest.CheckFor(t, loadFor, pollEvery, func() error {
		if n := hung.hits.Load(); n < capA {
			return fmt.Errorf("A's backend holds %d calls, want %d", n, capA)
		}
		return nil
	})
	for time.Now().Before(end) {
		r, err := call(urlMock)
		switch {
		case err != nil:
			fail("mock during the fault: %v", err)
		case r.status != http.StatusOK || string(r.body) != "mock ok":
			fail("mock during the fault: %v, want 200 \"mock ok\"", r)
		default:
			mockCalls++
		}
		if st, rz, err := edge.readyz(); err != nil || st != http.StatusOK {
			fail("edge /readyz during the fault: %d %s %v", st, rz.Reason, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()

	slices.Sort(latB)
	pct := func(p float64) time.Duration {
		if len(latB) == 0 {
			return 0
		}
		return latB[int(p*float64(len(latB)-1))].Round(time.Microsecond)
	}
	t.Logf("A: %v, slowest %v; A's backend saw %d calls", countA, slowestA.Round(time.Millisecond), hung.hits.Load())
	t.Logf("B: %d calls, p50 %v, p99 %v, max %v; mock: %d calls", countB, pct(0.5), pct(0.99), pct(1), mockCalls)

	if len(failures) > 0 {
		t.Errorf("%d unexpected outcomes, e.g.:\n%s", len(failures), strings.Join(failures[:min(len(failures), 10)], "\n"))
	}
	if countB < 50 {
		t.Errorf("B answered only %d calls in %v", countB, loadFor)
	}
	if countA["504 GATEWAY_TIMEOUT"] == 0 {
		t.Errorf("no call of A timed out (%v): the fault did not happen", countA)
	}
	if countA["503 OVERLOADED"] == 0 {
		t.Errorf("no call of A was refused with OVERLOADED (%v), with %d callers on a cap of %d", countA, loadersA, capA)
	}
	if mockCalls == 0 {
		t.Errorf("the mock API was not called during the fault")
	}
	// After the fault, B still answers.
	if r := get(t, urlB); r.status != http.StatusOK {
		t.Errorf("B after the fault: %v", r)
	}
}
