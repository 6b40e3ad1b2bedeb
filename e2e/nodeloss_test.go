package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// A drill of the operations issue, in short: under a steady load of
// idempotent calls, the NATS node the edge is connected to is killed
// (one of three). Every call succeeds — the ones in flight at that
// moment are sent again on the edge's next connection — and none
// outlives its deadline. A call that may not be sent twice fails at once
// with BUS_LOST instead of waiting for its deadline.
func TestCallsSurviveTheEdgesNATSNodeKilled(t *testing.T) {
	t.Parallel()
	servers, urls := natstest.RunCluster(t, 3, nil)
	var hits, posts atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method == http.MethodPost {
			posts.Add(1)
			time.Sleep(1500 * time.Millisecond) // in flight when the node dies (its shutdown takes a moment)
		} else {
			time.Sleep(2 * time.Millisecond)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer be.Close()
	for _, doc := range []string{
		entry("e2e.loss", "loss", "GET", "/loss", httpBackend(be.URL), map[string]any{"timeout": "3s"}),
		entry("e2e.loss-post", "loss", "POST", "/loss", httpBackend(be.URL), map[string]any{"timeout": "3s"}),
	} {
		if res := jetway(t, doc, "api", "put", "-", "--nats", urls, "--replicas", "3"); res.code != 0 {
			t.Fatalf("api put: %d %s%s", res.code, res.stdout, res.stderr)
		}
	}
	// The edge knows node 0 only (it learns the others from it); one
	// worker is on node 0 too, and answers after its reconnect what it
	// held, the other on node 1.
	edge := startNode(t, "edge", "edge", "", "--nats", servers[0].ClientURL())
	w0 := startNode(t, "worker-0", "worker", "", "--nats", servers[0].ClientURL(), "--pool", "loss")
	w1 := startNode(t, "worker-1", "worker", "", "--nats", servers[1].ClientURL(), "--pool", "loss")
	for _, n := range []*node{edge, w0, w1} {
		n.waitReady(t)
	}
	w0.waitServing(t, "e2e.loss")
	w1.waitServing(t, "e2e.loss")
	waitBody(t, edge.edge+"/loss", "ok")

	ld := startGets(edge.edge+"/loss", 8)
	// A POST in flight when the node dies.
	post := make(chan string, 1)
	time.Sleep(time.Second)
	go func() {
		start := time.Now()
		r, err := do(http.MethodPost, edge.edge+"/loss", strings.NewReader("x"), nil)
		if err != nil {
			post <- err.Error()
			return
		}
		post <- fmt.Sprintf("%d %s after %s", r.status, r.gwErr().Code, time.Since(start).Round(time.Millisecond))
	}()
	// The POST is in flight on the edge's connection once the backend has
	// it (a fixed pause was not enough on race-built processes).
	natstest.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if posts.Load() == 0 {
			return fmt.Errorf("the POST has not reached the backend")
		}
		return nil
	})
	servers[0].Shutdown()
	killed := time.Now()
	time.Sleep(2 * time.Second)
	calls, failures, longest := ld.stop()

	p := <-post
	t.Logf("%d calls, %d failed, longest %s; the POST: %s", calls, len(failures), longest.Round(time.Millisecond), p)
	if len(failures) > 0 {
		t.Fatalf("%d of %d idempotent calls failed through the node loss (at %s): %v", len(failures), calls, killed.Format("15:04:05.000"), failures)
	}
	if longest > 3*time.Second+100*time.Millisecond {
		t.Fatalf("a call took %s: past its deadline of 3s", longest)
	}
	// The POST was in flight on the lost connection: it fails at once,
	// saying so, never a 504 at its deadline.
	if !strings.HasPrefix(p, "502 BUS_LOST") {
		t.Fatalf("the POST in flight when the edge's node died: %s, want 502 BUS_LOST at once", p)
	}
	// The edge's /metrics counts the calls the loss interrupted.
	m := get(t, edge.admin+"/metrics")
	if !regexp.MustCompile(`jetway_nats_calls_interrupted_total\{node="[^"]+",role="edge",conn="edge"\} [1-9]`).Match(m.body) {
		t.Fatalf("/metrics does not count the interrupted calls:\n%s", m.body)
	}
}

// A NATS node that freezes (its connections open, silent) under load: the
// edge's calls in flight on it are the evidence, the edge leaves it for
// another node within about a second and sends them again there. No call
// fails.
func TestEdgeLeavesAFrozenNATSNode(t *testing.T) {
	t.Parallel()
	servers, urls := natstest.RunCluster(t, 3, nil)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	defer be.Close()
	if res := jetway(t, entry("e2e.frozen", "frozen", "GET", "/frozen", httpBackend(be.URL), map[string]any{"timeout": "5s"}),
		"api", "put", "-", "--nats", urls, "--replicas", "3"); res.code != 0 {
		t.Fatalf("api put: %d %s%s", res.code, res.stdout, res.stderr)
	}
	// The edge reaches node 0 through a proxy that can freeze it.
	px := natstest.NewProxy(t, servers[0].Addr().String())
	edge := startNode(t, "edge", "edge", "", "--nats", px.URL())
	w := startNode(t, "worker", "worker", "", "--nats", servers[1].ClientURL(), "--pool", "frozen")
	edge.waitReady(t)
	w.waitServing(t, "e2e.frozen")
	waitBody(t, edge.edge+"/frozen", "ok")

	ld := startGets(edge.edge+"/frozen", 4)
	time.Sleep(500 * time.Millisecond)
	px.Freeze()
	time.Sleep(4 * time.Second)
	calls, failures, longest := ld.stop()
	t.Logf("%d calls, %d failed, longest %s (the freeze's detection and the calls sent again)", calls, len(failures), longest.Round(time.Millisecond))
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed through the freeze: %v", len(failures), calls, failures)
	}
	if longest > 3*time.Second {
		t.Fatalf("a call took %s: the frozen node was not left within 3s", longest)
	}
}

// /readyz says when the edge cannot carry calls: a frozen NATS (the only
// one it knows) turns it 503 within the pings' 3 s, saying why; back to
// 200 when the server answers again.
func TestReadyzOnAFrozenNATS(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	px := natstest.NewProxy(t, ns.Addr().String())
	edge := startNode(t, "edge", "edge", "", "--nats", px.URL())
	edge.waitReady(t)
	px.Freeze()
	frozen := time.Now()
	var rz readyz
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		st, r, err := edge.readyz()
		if err != nil {
			return err
		}
		if st != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d: %s", st, r.Reason)
		}
		rz = r
		return nil
	})
	t.Logf("/readyz 503 %s after the freeze: %s", time.Since(frozen).Round(time.Millisecond), rz.Reason)
	if !strings.Contains(rz.Reason, "nats connection of the edge") {
		t.Fatalf("/readyz reason %q does not say the edge's connection is down", rz.Reason)
	}
	px.Thaw()
	edge.waitReady(t)
}

// gets is a steady load of GETs on one URL from a few callers, each in a
// loop, until stop: how many calls, which failed, the longest.
type gets struct {
	mu       sync.Mutex
	calls    int
	failures []string
	longest  time.Duration
	done     chan struct{}
	wg       sync.WaitGroup
}

func startGets(url string, callers int) *gets {
	g := &gets{done: make(chan struct{})}
	for range callers {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				select {
				case <-g.done:
					return
				default:
				}
				start := time.Now()
				r, err := do(http.MethodGet, url, nil, nil)
				took := time.Since(start)
				g.mu.Lock()
				g.calls++
				g.longest = max(g.longest, took)
				if err != nil || r.status != http.StatusOK {
					g.failures = append(g.failures, fmt.Sprintf("%v %v after %s", err, r, took.Round(time.Millisecond)))
				}
				g.mu.Unlock()
			}
		}()
	}
	return g
}

// stop ends the load and says what it saw.
func (g *gets) stop() (calls int, failures []string, longest time.Duration) {
	close(g.done)
	g.wg.Wait()
	return g.calls, g.failures, g.longest
}
