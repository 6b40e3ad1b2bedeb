package edge_test

import (
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

func TestSandboxTier(t *testing.T) {
	prod, sandbox := newTierBackend(t, "production"), newTierBackend(t, "sandbox")
	g := newGateway(t) // its worker serves every pool
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	a := g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders/{id}"},
		"backend":{"type":"http","url":"` + prod.URL + `/orders/{id}"},
		"auth":{"methods":["key"]},"rate_limits":[{"limit":3,"window":"1m"}],
		"sandbox":{"backend":{"type":"http","url":"` + sandbox.URL + `/sb/{id}"},"rate_limits":[{"limit":2,"window":"1m"}]}}`)
	g.WaitServing("orders.get@sandbox", a.Revision)
	g.Publish(`{"name":"users.get","pool":"users","route":{"path":"/users"},"backend":{"type":"http","url":"` + prod.URL + `/users"},
		"auth":{"methods":["key"]}}`)

	t.Run("each app reaches its own tier", func(t *testing.T) {
		r := g.Do("GET", "/orders/1", nil, "X-Api-Key", liveKey, "X-Jetway-Sandbox", "true")
		if r.Status != 200 || r.Body != "production" || r.Header.Get("X-Jetway-Sandbox") != "" {
			t.Fatalf("live app: %d %q sandbox header %q", r.Status, r.Body, r.Header.Get("X-Jetway-Sandbox"))
		}
		r = g.Do("GET", "/orders/2", nil, "X-Api-Key", testKey)
		if r.Status != 200 || r.Body != "sandbox" || r.Header.Get("X-Jetway-Sandbox") != "true" {
			t.Fatalf("sandbox app: %d %q sandbox header %q", r.Status, r.Body, r.Header.Get("X-Jetway-Sandbox"))
		}
		// A caller's own X-Jetway-Sandbox never reaches a backend.
		if got := fmt.Sprint(prod.calls(), sandbox.calls()); got != "[live  /orders/1] [tester true /sb/2]" {
			t.Fatalf("backends saw %s", got)
		}
	})
	t.Run("an API without a sandbox tier refuses sandbox apps", func(t *testing.T) {
		before := len(prod.calls())
		if r := g.Do("GET", "/users", nil, "X-Api-Key", testKey); r.Status != 403 || r.Code != "NO_SANDBOX" {
			t.Fatalf("%d %s %s", r.Status, r.Code, r.Body)
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
			if r := g.Do("GET", "/orders/3", nil, "X-Api-Key", testKey); r.Status != w {
				t.Fatalf("sandbox call %d: %d %s, want %d", i, r.Status, r.Body, w)
			}
		}
		for i := range 2 {
			if r := g.Do("GET", "/orders/4", nil, "X-Api-Key", liveKey); r.Status != 200 {
				t.Fatalf("production call %d after the sandbox's limit: %d %s", i, r.Status, r.Body)
			}
		}
	})
	t.Run("flipping the mark is live", func(t *testing.T) {
		g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}})
		if r := g.Do("GET", "/users", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("after the mark went off: %d %s", r.Status, r.Body)
		}
	})
	t.Run("metrics keep the tiers apart", func(t *testing.T) {
		var b strings.Builder
		if err := g.Metrics.WritePrometheus(&b); err != nil {
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
		g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders/{id}"},"backend":{"type":"http","url":"` + prod.URL + `/orders/{id}"}}`)
		natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
			if _, ok := g.Worker.Serving("orders.get@sandbox"); ok {
				return fmt.Errorf("still subscribed: %v", g.Worker.Subscribed())
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
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	g.Publish(`{"name":"orders.get","pool":"orders","route":{"path":"/orders"},"backend":{"type":"http","url":"` + prod.URL + `"},
		"auth":{"methods":["key"]},"sandbox":{"pool":"orders-sandbox","backend":{"type":"mock","json":{"id":"fake"}}}}`)
	if _, ok := g.Worker.Serving("orders.get@sandbox"); ok {
		t.Fatal("a worker of pool orders serves the sandbox pool")
	}
	if r := g.Do("GET", "/orders", nil, "X-Api-Key", testKey); r.Status != 503 || r.Code != "NO_WORKERS" {
		t.Fatalf("sandbox call: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/orders", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
		t.Fatalf("production call: %d %s", r.Status, r.Body)
	}
	if got := fmt.Sprint(prod.calls()); got != "[live  /]" {
		t.Fatalf("production backend saw %s", got)
	}
}
