package jetwaytest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// The steps of Example, run.
func TestExampleFlow(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "order "+r.URL.Path+" for "+r.Header.Get("X-Jetway-App"))
	}))
	defer backend.Close()
	g := jetwaytest.Start(t, "orders")
	key := g.PutKeyedApp("shop")
	g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/v1/orders/{id}"},
		"auth":{"methods":["key"]},"backend":{"type":"http","url":"` + backend.URL + `/orders/{id}"}}`)
	if r := g.Do("GET", "/v1/orders/42", nil, "X-Api-Key", key); r.Status != 200 || r.Body != "order /orders/42 for shop" || r.Code != "" {
		t.Fatalf("with the key: %d %q %q", r.Status, r.Body, r.Code)
	}
	if r := g.Do("GET", "/v1/orders/42", nil); r.Status != 401 || r.Code != "UNAUTHENTICATED" || r.Header.Get("Content-Type") == "" {
		t.Fatalf("without: %d %q %v", r.Status, r.Code, r.Header)
	}
}

// Publish returns once every worker of the API's pool serves the new
// revision (not only the first worker), skips workers of other pools, and
// waits at the edge only for a pool no worker serves.
func TestPublishWaitsForThePoolsWorkers(t *testing.T) {
	g := jetwaytest.Start(t, "a")
	g.AddWorker("b")
	ws := []*workers.Worker{g.Worker}
	for i := 1; i <= 5; i++ {
		// A worker added just before is the one most likely to lag.
		ws = append(ws, g.AddWorker("b", "a"))
		a := g.Publish(`{"name":"x","pool":"a","route":{"path":"/x"},"backend":{"type":"mock","body":"v"}}`)
		for j, w := range ws {
			if rev, ok := w.Serving("x"); !ok || rev != a.Revision {
				t.Fatalf("publish %d: worker %d serves revision %d, %v; want %d", i, j, rev, ok, a.Revision)
			}
		}
	}
	g.Publish(`{"name":"y","pool":"nobody","route":{"path":"/y"},"backend":{"type":"mock"}}`)
	if r := g.Do("GET", "/y", nil); r.Status != 503 || r.Code != "NO_WORKERS" {
		t.Fatalf("an API of a pool without workers: %d %s", r.Status, r.Body)
	}
}

// PutRaw writes what the client refuses (a second API on a route), and the
// edge has it when PutRaw returns.
func TestPutRaw(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"first","pool":"p","route":{"path":"/r"},"backend":{"type":"mock","body":"first"}}`)
	second := `{"name":"second","pool":"p","route":{"path":"/r"},"backend":{"type":"mock","body":"second"}}`
	var rc *registry.RouteConflictError
	if _, err := g.Client.Put(context.Background(), []byte(second)); !errors.As(err, &rc) {
		t.Fatalf("client put of a conflicting route: %v", err)
	}
	rev := g.PutRaw("second", second)
	if got := g.EdgeWatcher.Current().APIs["second"]; got == nil || got.Revision != rev {
		t.Fatalf("edge has %+v, want revision %d", got, rev)
	}
	if r := g.Do("GET", "/r", nil); r.Body != "first" {
		t.Fatalf("the route holder changed: %q", r.Body)
	}
}

// AddEdge serves the same registry on its own URL, reached with Do.
func TestAddEdge(t *testing.T) {
	g := jetwaytest.Start(t)
	url, w, e := g.AddEdge(t, edge.Options{})
	if url == g.URL || w == g.EdgeWatcher || e == g.Edge {
		t.Fatal("AddEdge returned the first edge")
	}
	a := g.Publish(`{"name":"m","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"both"}}`)
	// Publish waits for the first edge only.
	natstest.CheckFor(t, jetwaytest.Wait, 2*time.Millisecond, func() error {
		if got := w.Current().APIs["m"]; got == nil || got.Revision != a.Revision {
			return fmt.Errorf("second edge lacks m@%d", a.Revision)
		}
		return nil
	})
	for _, base := range []string{g.URL, url} {
		if r := jetwaytest.Do(t, base, "GET", "/m", nil); r.Status != 200 || r.Body != "both" {
			t.Fatalf("%s: %d %q", base, r.Status, r.Body)
		}
	}
}
