package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// itemsBackend answers /items/{id} with "item {id}", except /items/block,
// which blocks until the backend is released.
func itemsBackend(t *testing.T) *backend {
	return newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/items/block" {
			b.block(w, r)
			return
		}
		_, _ = io.WriteString(w, "item "+r.URL.Path[len("/items/"):])
	})
}

// TestWorkerKilledWhileIdle kills the only worker of a pool with SIGKILL:
// the next call fails at once with 503 NO_WORKERS (NATS no-responders),
// far within the API's 5s timeout.
func TestWorkerKilledWhileIdle(t *testing.T) {
	t.Parallel()
	be := itemsBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	worker := c.startWorker(t, "worker", "idle")
	putAPI(t, c.url, entry("idle.items", "idle", "GET", "/v1/idle/{id}", httpBackend(be.URL+"/items/{id}"), map[string]any{"timeout": "5s"}))
	waitBody(t, edge.edge+"/v1/idle/1", "item 1")

	worker.kill9(t)
	// The server notices the closed socket asynchronously; only then can it
	// know that nobody listens.
	waitConns(t, c.ns, "jetway-worker", 0)

	r := get(t, edge.edge+"/v1/idle/2")
	wantError(t, r, http.StatusServiceUnavailable, "NO_WORKERS")
	if r.took >= time.Second {
		t.Errorf("NO_WORKERS after %v, want well under the 5s API timeout (< 1s)", r.took)
	}
}

// TestWorkerKilledOtherServes runs two workers of one pool and kills one:
// every call still succeeds through the other.
func TestWorkerKilledOtherServes(t *testing.T) {
	t.Parallel()
	be := itemsBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	w1 := c.startWorker(t, "worker-1", "pair")
	w2 := c.startWorker(t, "worker-2", "pair")
	putAPI(t, c.url, entry("pair.items", "pair", "GET", "/v1/pair/{id}", httpBackend(be.URL+"/items/{id}"), map[string]any{"timeout": "5s"}))
	w1.waitServing(t, "pair.items")
	w2.waitServing(t, "pair.items")
	waitBody(t, edge.edge+"/v1/pair/0", "item 0")
	waitConns(t, c.ns, "jetway-worker", 2)

	w1.kill9(t)
	waitConns(t, c.ns, "jetway-worker", 1)

	for i := 1; i <= 20; i++ {
		r := get(t, fmt.Sprintf("%s/v1/pair/%d", edge.edge, i))
		if want := fmt.Sprintf("item %d", i); r.status != http.StatusOK || string(r.body) != want {
			t.Fatalf("call %d with one worker left: %v, want 200 %q", i, r, want)
		}
	}
}

// TestWorkerKilledWhileServing kills the worker while the backend holds a
// call: the caller gets 504 GATEWAY_TIMEOUT at the API's deadline, not a
// hang and not earlier.
func TestWorkerKilledWhileServing(t *testing.T) {
	t.Parallel()
	be := itemsBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	worker := c.startWorker(t, "worker", "mid")
	const timeout = 1500 * time.Millisecond
	putAPI(t, c.url, entry("mid.items", "mid", "GET", "/v1/mid/{id}", httpBackend(be.URL+"/items/{id}"), map[string]any{"timeout": timeout.String()}))
	waitBody(t, edge.edge+"/v1/mid/1", "item 1")

	type result struct {
		r   response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := do(http.MethodGet, edge.edge+"/v1/mid/block", nil, nil)
		done <- result{r, err}
	}()
	be.waitArrivals(t, "/items/block", 1, 5*time.Second)
	worker.kill9(t)

	var res result
	select {
	case res = <-done:
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("the call hangs after its worker was killed")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	wantError(t, res.r, http.StatusGatewayTimeout, "GATEWAY_TIMEOUT")
	if res.r.took < timeout-100*time.Millisecond || res.r.took > timeout+time.Second {
		t.Errorf("504 after %v, want at about the %v deadline (within +1s)", res.r.took, timeout)
	}
}

// TestHangingBackendIsolated points one API at a backend that never
// answers: its callers get 504 GATEWAY_TIMEOUT at the API's timeout, while
// an API of another pool, served by another worker process, keeps
// answering 200 quickly under concurrent load during that time.
func TestHangingBackendIsolated(t *testing.T) {
	t.Parallel()
	hang := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("probe") == "1" {
			_, _ = io.WriteString(w, "probe")
			return
		}
		select { // never answers by itself
		case <-b.released:
		case <-r.Context().Done():
		}
	})
	fast := itemsBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker-slow", "slow")
	c.startWorker(t, "worker-fast", "fast")
	// Long enough for the 20 fast calls to be served while the slow ones
	// hang, on race-built processes of a busy box.
	const timeout = 5 * time.Second
	putAPI(t, c.url, entry("slow.hang", "slow", "GET", "/v1/hang", httpBackend(hang.URL+"/hang"), map[string]any{"timeout": timeout.String()}))
	putAPI(t, c.url, entry("fast.items", "fast", "GET", "/v1/fast/{id}", httpBackend(fast.URL+"/items/{id}"), map[string]any{"timeout": timeout.String()}))
	waitBody(t, edge.edge+"/v1/fast/0", "item 0")
	// Probes (the query passes through) answer at once: the API is served.
	waitBody(t, edge.edge+"/v1/hang?probe=1", "probe")
	for len(hang.arrived) > 0 {
		<-hang.arrived
	}

	const slowCalls, fastCalls = 8, 20
	var slowDone atomic.Int32
	var wg sync.WaitGroup
	slow := make([]response, slowCalls)
	slowErr := make([]error, slowCalls)
	for i := range slowCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slow[i], slowErr[i] = do(http.MethodGet, edge.edge+"/v1/hang", nil, nil)
			slowDone.Add(1)
		}()
	}
	hang.waitArrivals(t, "/hang", slowCalls, 5*time.Second)

	// While every slow call hangs, the other pool answers.
	fastRes := make([]response, fastCalls)
	fastErr := make([]error, fastCalls)
	var fwg sync.WaitGroup
	for i := range fastCalls {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			fastRes[i], fastErr[i] = do(http.MethodGet, fmt.Sprintf("%s/v1/fast/%d", edge.edge, i), nil, nil)
		}()
	}
	fwg.Wait()
	if n := slowDone.Load(); n != 0 {
		t.Errorf("%d slow calls finished before the fast load was served; the test proves nothing", n)
	}
	for i := range fastCalls {
		if fastErr[i] != nil {
			t.Errorf("fast call %d: %v", i, fastErr[i])
			continue
		}
		if want := fmt.Sprintf("item %d", i); fastRes[i].status != http.StatusOK || string(fastRes[i].body) != want {
			t.Errorf("fast call %d while the other pool hangs: %v, want 200 %q", i, fastRes[i], want)
		} else if fastRes[i].took > time.Second {
			t.Errorf("fast call %d took %v while the other pool hangs", i, fastRes[i].took)
		}
	}

	wg.Wait()
	for i := range slowCalls {
		if slowErr[i] != nil {
			t.Errorf("slow call %d: %v", i, slowErr[i])
			continue
		}
		wantError(t, slow[i], http.StatusGatewayTimeout, "GATEWAY_TIMEOUT")
		if took := slow[i].took; took < timeout-100*time.Millisecond || took > timeout+time.Second {
			t.Errorf("slow call %d: 504 after %v, want at about the %v timeout", i, took, timeout)
		}
	}
}

// TestWorkerMadeErrorsCarryRequestID points an API at a backend that
// refuses connections: the worker answers 502 BAD_GATEWAY, which reaches
// the caller as a gateway error with the request's id, like every other.
func TestWorkerMadeErrorsCarryRequestID(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "gone")
	dead := fmt.Sprintf("http://127.0.0.1:%d/x", natstest.FreePort(t)) // nothing listens
	putAPI(t, c.url, entry("gone.backend", "gone", "GET", "/v1/gone", httpBackend(dead), map[string]any{"timeout": "5s"}))
	r := waitStatus(t, edge.edge+"/v1/gone", http.StatusBadGateway)
	wantError(t, r, http.StatusBadGateway, "BAD_GATEWAY")
}
