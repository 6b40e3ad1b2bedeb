package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// slowBackend answers /work/{id} after 700ms, and /work/probe at once.
func slowBackend(t *testing.T) *backend {
	return newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work/probe" {
			select {
			case <-time.After(700 * time.Millisecond):
			case <-b.released:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "done "+strings.TrimPrefix(r.URL.Path, "/work/"))
	})
}

type callResult struct {
	r   response
	err error
}

// callAsync starts a GET and returns where its result will arrive.
func callAsync(url string) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		r, err := do(http.MethodGet, url, nil, nil)
		ch <- callResult{r, err}
	}()
	return ch
}

func wantDone(t *testing.T, ch <-chan callResult, body string) {
	t.Helper()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("in-flight call failed during drain: %v", res.err)
		}
		if res.r.status != http.StatusOK || string(res.r.body) != body {
			t.Fatalf("in-flight call during drain: %v, want 200 %q", res.r, body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight call did not finish during drain")
	}
}

// TestGracefulDrainEdge sends SIGTERM to an edge while a call is in flight:
// the edge stops accepting connections at once, the call still completes
// with 200, and the process exits 0.
func TestGracefulDrainEdge(t *testing.T) {
	t.Parallel()
	be := slowBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	c.startWorker(t, "worker", "drain-e")
	putAPI(t, c.url, entry("drain.edge", "drain-e", "GET", "/v1/drain/{id}", httpBackend(be.URL+"/work/{id}"), map[string]any{"timeout": "5s"}))
	waitBody(t, edge.edge+"/v1/drain/probe", "done probe")

	call := callAsync(edge.edge + "/v1/drain/1")
	be.waitArrivals(t, "/work/1", 1, 5*time.Second)
	edge.signal(t, syscall.SIGTERM)

	addr := strings.TrimPrefix(edge.edge, "http://")
	natstest.CheckFor(t, 5*time.Second, pollEvery, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil // refused: the listener is closed
		}
		conn.Close()
		return fmt.Errorf("edge still accepts connections after SIGTERM")
	})
	wantDone(t, call, "done 1")
	if code := edge.waitExit(t, exitTimeout); code != 0 {
		t.Errorf("edge exited %d after SIGTERM, want 0", code)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("edge address accepts connections after the edge exited")
	}
}

// TestGracefulDrainWorker sends SIGTERM to a worker while it serves a call:
// the call still completes with 200, the worker exits 0, and afterwards
// calls fail at once with NO_WORKERS.
func TestGracefulDrainWorker(t *testing.T) {
	t.Parallel()
	be := slowBackend(t)
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	worker := c.startWorker(t, "worker", "drain-w")
	putAPI(t, c.url, entry("drain.worker", "drain-w", "GET", "/v1/drainw/{id}", httpBackend(be.URL+"/work/{id}"), map[string]any{"timeout": "5s"}))
	waitBody(t, edge.edge+"/v1/drainw/probe", "done probe")

	call := callAsync(edge.edge + "/v1/drainw/1")
	be.waitArrivals(t, "/work/1", 1, 5*time.Second)
	worker.signal(t, syscall.SIGTERM)

	// While it drains, the worker says it is not ready, and why.
	natstest.CheckFor(t, 5*time.Second, pollEvery, func() error {
		r, err := do(http.MethodGet, worker.admin+"/readyz", nil, nil)
		if err != nil {
			return err
		}
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "draining") {
			return fmt.Errorf("readyz during drain: %v", r)
		}
		return nil
	})
	wantDone(t, call, "done 1")
	if code := worker.waitExit(t, exitTimeout); code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0", code)
	}
	waitConns(t, c.ns, "jetway-worker", 0)
	r := get(t, edge.edge+"/v1/drainw/2")
	wantError(t, r, http.StatusServiceUnavailable, "NO_WORKERS")
	if r.took >= time.Second {
		t.Errorf("NO_WORKERS after %v, want at once", r.took)
	}
}
