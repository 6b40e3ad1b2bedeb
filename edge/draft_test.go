package edge_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"

	"github.com/jetway-gw/jetway/registry"
)

// keyBackend answers its name and remembers the X-Api-Key and
// X-Jetway-Sandbox each call brought.
type keyBackend struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newKeyBackend(t *testing.T, name string) *keyBackend {
	b := &keyBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, fmt.Sprintf("key=%q sandbox=%q", r.Header.Get("X-Api-Key"), r.Header.Get("X-Jetway-Sandbox")))
		b.mu.Unlock()
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *keyBackend) last() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) == 0 {
		return ""
	}
	return b.seen[len(b.seen)-1]
}

func (b *keyBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seen)
}

// TestDrafts: a draft is served to sandbox apps only, on its API's route
// or on a route of its own, and says which revision answered.
func TestDrafts(t *testing.T) {
	prod, draft := newKeyBackend(t, "production"), newKeyBackend(t, "draft")
	g := newGateway(t)
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	g.Publish(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + prod.URL + `/o/{id}"}}`)
	d := g.PublishDraft(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `/o/{id}"}}`)
	rev := strconv.FormatUint(d.Revision, 10)

	t.Run("on its API's route, sandbox apps get the draft", func(t *testing.T) {
		if r := g.Do("GET", "/orders/1", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" || r.Header.Get("X-Jetway-Draft") != "" {
			t.Fatalf("production app: %d %q draft %q", r.Status, r.Body, r.Header.Get("X-Jetway-Draft"))
		}
		r := g.Do("GET", "/orders/1", nil, "X-Api-Key", testKey)
		if r.Status != 200 || r.Body != "draft" || r.Header.Get("X-Jetway-Draft") != rev || r.Header.Get("X-Jetway-Sandbox") != "true" {
			t.Fatalf("sandbox app: %d %q draft %q sandbox %q", r.Status, r.Body, r.Header.Get("X-Jetway-Draft"), r.Header.Get("X-Jetway-Sandbox"))
		}
		if got := draft.last(); got != `key="" sandbox="true"` {
			t.Fatalf("the draft's backend saw %s", got)
		}
	})

	g.Publish(`{"name":"stock","pool":"orders","route":{"path":"/stock"},"backend":{"type":"http","url":"` + prod.URL + `"}}`)
	g.PublishDraft(`{"name":"stock","pool":"orders","route":{"path":"/stock"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `"}}`)
	t.Run("an open API's draft takes a sandbox app's credentials; others pass through as before", func(t *testing.T) {
		if r := g.Do("GET", "/stock", nil); r.Status != 200 || r.Body != "production" {
			t.Fatalf("anonymous: %d %s", r.Status, r.Body)
		}
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("production app: %d %s", r.Status, r.Body)
		}
		// The open API's backend still gets what the caller sent.
		if got := prod.last(); got != fmt.Sprintf("key=%q sandbox=\"\"", liveKey) {
			t.Fatalf("production saw %s", got)
		}
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "draft" {
			t.Fatalf("sandbox app: %d %s", r.Status, r.Body)
		}
		if got := draft.last(); got != `key="" sandbox="true"` {
			t.Fatalf("the draft's backend saw %s", got)
		}
	})

	g.PublishDraft(`{"name":"refunds","pool":"orders","route":{"method":"POST","path":"/refunds"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `"}}`)
	t.Run("a new API's draft is there for sandbox apps alone", func(t *testing.T) {
		before := draft.count()
		for _, hdr := range [][]string{nil, {"X-Api-Key", liveKey}, {"X-Api-Key", "not-a-key"}} {
			r := g.Do("POST", "/refunds", nil, hdr...)
			if r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" {
				t.Fatalf("with %v: %d %s, want the 404 of no route", hdr, r.Status, r.Body)
			}
		}
		if draft.count() != before {
			t.Fatal("a production caller reached the draft")
		}
		if r := g.Do("POST", "/refunds", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "draft" {
			t.Fatalf("sandbox app: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a draft that drops a method refuses it", func(t *testing.T) {
		g.PublishDraft(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["hmac"]},
			"backend":{"type":"http","url":"` + draft.URL + `/o/{id}"}}`)
		r := g.Do("GET", "/orders/1", nil, "X-Api-Key", testKey)
		if r.Status != 401 || r.Code != "UNAUTHENTICATED" {
			t.Fatalf("sandbox app's key on an hmac-only draft: %d %s", r.Status, r.Body)
		}
		if r := g.Do("GET", "/orders/1", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("production app: %d %s", r.Status, r.Body)
		}
	})

	t.Run("deleting the draft gives sandbox apps the API as it is", func(t *testing.T) {
		if err := g.Client.Delete(t.Context(), registry.DraftKey("stock")); err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
			if g.EdgeWatcher.Current().Drafts["stock"] != nil {
				return fmt.Errorf("the edge still has the draft")
			}
			return nil
		})
		// An open API: the sandbox app is an anonymous caller there.
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
}

// A draft never answers from production's cache, nor production from the
// draft's, shared cache included: the same settings on one route keep two
// stores.
func TestDraftCacheIsItsOwn(t *testing.T) {
	// One backend for both, so both have the same cache settings and
	// target: it tells the calls apart by X-Jetway-Sandbox.
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Jetway-Sandbox") == "true" {
			io.WriteString(w, "draft")
			return
		}
		io.WriteString(w, "production")
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	entry := func(url string) string {
		return `{"name":"cat","pool":"p","route":{"path":"/cat"},"auth":{"methods":["key"]},
			"cache":{"ttl":"1m","shared":true,"key":{"app":false}},"backend":{"type":"http","url":"` + url + `"}}`
	}
	g.Publish(entry(be.URL))
	if r := g.Do("GET", "/cat", nil, "X-Api-Key", liveKey); r.Body != "production" {
		t.Fatalf("production: %d %s", r.Status, r.Body)
	}
	g.PublishDraft(entry(be.URL))
	// A second edge has no local answers: only the shared cache could
	// give it production's.
	url, _, _ := g.addEdge(t)
	for _, base := range []string{g.URL, url} {
		r, err := http.DefaultClient.Do(mustRequest(t, base+"/cat", "X-Api-Key", testKey))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if string(b) != "draft" {
			t.Fatalf("sandbox app on %s: %d %s (cache %s)", base, r.StatusCode, b, r.Header.Get("X-Jetway-Cache"))
		}
	}
}

func mustRequest(t *testing.T, url string, hdr ...string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// A draft's failing backend opens the draft's breaker only: its events
// name <name>@draft, which no production breaker of the pool takes.
func TestDraftBreakerIsItsOwn(t *testing.T) {
	g := newGateway(t)
	testKey, testRec, _ := registry.NewAPIKey()
	liveKey, liveRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	ok := newKeyBackend(t, "production")
	prodEvents, draftEvents := g.BreakerEvents("brk"), g.BreakerEvents("brk@draft")
	breaker := `"breaker":{"consecutive_failures":1,"open_for":"1m"}`
	g.Publish(`{"name":"brk","pool":"p","route":{"path":"/brk"},"auth":{"methods":["key"]},` + breaker + `,"backend":{"type":"http","url":"` + ok.URL + `"}}`)
	g.PublishDraft(`{"name":"brk","pool":"p","route":{"path":"/brk"},"auth":{"methods":["key"]},` + breaker + `,"backend":{"type":"http","url":"http://127.0.0.1:1"}}`)
	for range 2 {
		g.Do("GET", "/brk", nil, "X-Api-Key", testKey)
	}
	if ev := jetwaytest.NextBreakerEvent(t, draftEvents); ev.To != "open" {
		t.Fatalf("draft breaker event %+v", ev)
	}
	select {
	case ev := <-prodEvents:
		t.Fatalf("production's breaker subject got %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	if r := g.Do("GET", "/brk", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
		t.Fatalf("production after the draft's breaker opened: %d %s", r.Status, r.Body)
	}
}
