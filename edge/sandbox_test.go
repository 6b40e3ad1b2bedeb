package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// tierBackend is an HTTP backend that remembers what reached it.
type tierBackend struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // "app sandbox-header path"
}

func newTierBackend(t *testing.T, name string) *tierBackend {
	b := &tierBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, fmt.Sprintf("%s %s %s", r.Header.Get("X-Jetway-App"), r.Header.Get("X-Jetway-Sandbox"), r.URL.Path))
		b.mu.Unlock()
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *tierBackend) calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

// putApps stores apps and waits until the edge has them.
func (g *gateway) putApps(apps ...*registry.App) {
	g.t.Helper()
	revs := map[string]uint64{}
	for _, a := range apps {
		got, err := g.client.PutApp(context.Background(), a)
		if err != nil {
			g.t.Fatal(err)
		}
		revs[a.ID] = got.Revision
	}
	natstest.CheckFor(g.t, 3*time.Second, 2*time.Millisecond, func() error {
		for id, rev := range revs {
			if a := g.edgeW.Current().Apps[id]; a == nil || a.Revision != rev {
				return fmt.Errorf("edge has not applied app %s@%d", id, rev)
			}
		}
		return nil
	})
}

// waitServing waits until the worker serves an API tier (API.Key).
func (g *gateway) waitServing(key string, rev uint64) {
	g.t.Helper()
	natstest.CheckFor(g.t, 3*time.Second, 2*time.Millisecond, func() error {
		if got, ok := g.worker.Serving(key); !ok || got != rev {
			return fmt.Errorf("worker not serving %s@%d", key, rev)
		}
		return nil
	})
}

func TestSandboxTier(t *testing.T) {
	prod, sandbox := newTierBackend(t, "production"), newTierBackend(t, "sandbox")
	g := newGateway(t) // its worker serves every pool
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.putApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	a := g.publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders/{id}"},
		"backend":{"type":"http","url":"` + prod.URL + `/orders/{id}"},
		"auth":{"methods":["key"]},"rate_limits":[{"limit":3,"window":"1m"}],
		"sandbox":{"backend":{"type":"http","url":"` + sandbox.URL + `/sb/{id}"},"rate_limits":[{"limit":2,"window":"1m"}]}}`)
	g.waitServing("orders.get@sandbox", a.Revision)
	g.publish(`{"name":"users.get","pool":"users","route":{"path":"/users"},"backend":{"type":"http","url":"` + prod.URL + `/users"},
		"auth":{"methods":["key"]}}`)

	t.Run("each app reaches its own tier", func(t *testing.T) {
		r := g.do("GET", "/orders/1", nil, "X-Api-Key", liveKey, "X-Jetway-Sandbox", "true")
		if r.status != 200 || r.body != "production" || r.header.Get("X-Jetway-Sandbox") != "" {
			t.Fatalf("live app: %d %q sandbox header %q", r.status, r.body, r.header.Get("X-Jetway-Sandbox"))
		}
		r = g.do("GET", "/orders/2", nil, "X-Api-Key", testKey)
		if r.status != 200 || r.body != "sandbox" || r.header.Get("X-Jetway-Sandbox") != "true" {
			t.Fatalf("sandbox app: %d %q sandbox header %q", r.status, r.body, r.header.Get("X-Jetway-Sandbox"))
		}
		// A caller's own X-Jetway-Sandbox never reaches a backend.
		if got := fmt.Sprint(prod.calls(), sandbox.calls()); got != "[live  /orders/1] [tester true /sb/2]" {
			t.Fatalf("backends saw %s", got)
		}
	})
	t.Run("an API without a sandbox tier refuses sandbox apps", func(t *testing.T) {
		before := len(prod.calls())
		if r := g.do("GET", "/users", nil, "X-Api-Key", testKey); r.status != 403 || r.code != "NO_SANDBOX" {
			t.Fatalf("%d %s %s", r.status, r.code, r.body)
		}
		if len(prod.calls()) != before {
			t.Fatal("a sandbox app's call reached production")
		}
	})
	t.Run("limits are counted per tier", func(t *testing.T) {
		// One sandbox call was made above: the sandbox's limit of 2 admits
		// one more, while production's own count (1 of 3) is untouched.
		want := []int{200, 429}
		for i, w := range want {
			if r := g.do("GET", "/orders/3", nil, "X-Api-Key", testKey); r.status != w {
				t.Fatalf("sandbox call %d: %d %s, want %d", i, r.status, r.body, w)
			}
		}
		for i := range 2 {
			if r := g.do("GET", "/orders/4", nil, "X-Api-Key", liveKey); r.status != 200 {
				t.Fatalf("production call %d after the sandbox's limit: %d %s", i, r.status, r.body)
			}
		}
	})
	t.Run("flipping the mark is live", func(t *testing.T) {
		g.putApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}})
		if r := g.do("GET", "/users", nil, "X-Api-Key", testKey); r.status != 200 || r.body != "production" {
			t.Fatalf("after the mark went off: %d %s", r.status, r.body)
		}
	})
	t.Run("metrics keep the tiers apart", func(t *testing.T) {
		var b strings.Builder
		if err := g.metrics.WritePrometheus(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`jetway_requests_total{api="orders.get",pool="orders"`, `jetway_requests_total{api="orders.get@sandbox",pool="sandbox"`,
			`jetway_app_requests_total{app="tester",outcome="blocked"`, `jetway_app_requests_total{app="tester",outcome="succeeded"`,
			`jetway_app_requests_total{app="live",outcome="succeeded"`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("no %s in\n%s", want, b.String())
			}
		}
	})
	t.Run("removing the tier ends its subscription", func(t *testing.T) {
		g.publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders/{id}"},"backend":{"type":"http","url":"` + prod.URL + `/orders/{id}"}}`)
		natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
			if _, ok := g.worker.Serving("orders.get@sandbox"); ok {
				return fmt.Errorf("still subscribed: %v", g.worker.Subscribed())
			}
			return nil
		})
	})
}

// TestSandboxPoolIsABulkhead: without a worker of the sandbox pool, sandbox
// calls fail at once with NO_WORKERS, and production is not touched.
func TestSandboxPoolIsABulkhead(t *testing.T) {
	prod := newTierBackend(t, "production")
	g := newGateway(t, "orders") // no worker for the sandbox pool
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.putApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	g.publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders"},"backend":{"type":"http","url":"` + prod.URL + `"},
		"auth":{"methods":["key"]},"sandbox":{"pool":"orders-sandbox","backend":{"type":"mock","json":{"id":"fake"}}}}`)
	if _, ok := g.worker.Serving("orders.get@sandbox"); ok {
		t.Fatal("a worker of pool orders serves the sandbox pool")
	}
	if r := g.do("GET", "/orders", nil, "X-Api-Key", testKey); r.status != 503 || r.code != "NO_WORKERS" {
		t.Fatalf("sandbox call: %d %s", r.status, r.body)
	}
	if r := g.do("GET", "/orders", nil, "X-Api-Key", liveKey); r.status != 200 || r.body != "production" {
		t.Fatalf("production call: %d %s", r.status, r.body)
	}
	if got := fmt.Sprint(prod.calls()); got != "[live  /]" {
		t.Fatalf("production backend saw %s", got)
	}
}
